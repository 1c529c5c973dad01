"""NoOrphanWorkers (MUST): after the loader's process dies, every worker exits, busy and blocked
ones included."""

from __future__ import annotations

import pytest

from conformance.harness import MUST_BOUND_S, Grade, checks, play, workers
from faultinject.plans import parent_dies_while

PROP = "NoOrphanWorkers"


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
    r = play(
        loader_cls,
        parent_dies_while(state),
        deadline_s=60.0,
        parent_dies=True,
        orphan_grace_s=MUST_BOUND_S,
    )
    assert r.report is not None
    if (
        r.report.outcome == "killed"
        and not r.report.orphan_exit_s
        and workers(loader_cls) != ("processes")
    ):
        grade.note(f"holds trivially: no worker process ({workers(loader_cls)}) to outlive it")
        return
    if r.report.outcome != "killed" or not r.report.orphan_exit_s:
        pytest.fail(
            f"setup: expected the loader's process to reach {state!r} and die; "
            f"got {r.report.outcome} {r.report.error or ''}",
            pytrace=False,
        )
    if any(not e["value"] for e in r.of(0, "awaited")):
        pytest.fail(f"setup: the workers never reached {state!r}", pytrace=False)
    checks.orphans_exit(grade, r, f"{state} workers")
