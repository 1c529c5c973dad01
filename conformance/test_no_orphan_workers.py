"""NoOrphanWorkers (MUST): after the loader's process dies, every worker exits, busy and blocked
ones included."""

from __future__ import annotations

from typing import Any

import pytest

from conformance import _scenarios
from conformance._cases import kwargs
from conformance._sandbox import Outcome, run_bounded, wait_pids_gone
from conformance.grading import MUST_BOUND_S, Grade

PROP = "NoOrphanWorkers"


def _watch_orphans(outcome: Outcome) -> dict[int, float | None]:
    pids = next((n["pids"] for n in outcome.notes if n.get("kind") == "pids"), [])
    return wait_pids_gone(pids, MUST_BOUND_S)


@pytest.mark.spec_property(PROP, "PromptFaultHandling")
@pytest.mark.parametrize("state", ["idle", "busy", "blocked"])
def test_workers_exit_after_the_loader_process_is_sigkilled(
    loader_cls: type, grade: Grade, state: str
) -> None:
    """SIGKILL the loader's process while its workers are idle, busy in __getitem__, or blocked
    writing a result: every worker exits on its own.

    Property: NoOrphanWorkers (15 s MUST, 0.5 s SHOULD). Seed (NOTE, 3): "we must ensure that each
    process will exit even the process that should send/receive data to/from it were killed".
    Guards: C1 pytorch/pytorch#5736 (idle), C3 NVIDIA/Megatron-LM PR #3684 (busy), C2
    GaTech-RL2/EgoVerse#682 (blocked on a full pipe); G5 pytorch PR #81660 removed this case.
    """
    outcome = run_bounded(
        _scenarios.parent_killed,
        loader_cls,
        state,
        kwargs(2, 2, batch_size=1),
        deadline_s=60.0,
        after_exit=_watch_orphans,
    )
    note: dict[str, Any] = next((n for n in outcome.notes if n.get("kind") == "pids"), {})
    if outcome.status != "killed" or not note.get("pids"):
        pytest.fail(
            f"setup: expected the loader's process to reach {state!r} and die; "
            f"got {outcome.status} {outcome.error or ''}",
            pytrace=False,
        )
    if not note["reached"]:
        pytest.fail(f"setup: the workers never reached {state!r}", pytrace=False)
    exits: dict[int, float | None] = outcome.after_exit
    alive = [pid for pid, t in exits.items() if t is None]
    if alive:
        grade.fail(
            PROP,
            f"every worker gone within {MUST_BOUND_S:g} s of the parent's SIGKILL",
            f"workers {alive} still alive ({state}); killed by the harness",
        )
    slowest = max(t for t in exits.values() if t is not None)
    grade.bounded(PROP, "orphan_exit_s", slowest, f"{state} workers exiting after parent death")
