"""NoOrphanWorkers (MUST): after the loader's process dies, every worker exits, busy and blocked
ones included."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    EVERY,
    MUST_BOUND_S,
    Await,
    Grade,
    Leave,
    Plan,
    Run,
    Sleep,
    checks,
    play,
    spec_property,
    workers,
)
from loaderspec.faultinject.events import Awaited
from loaderspec.faultinject.plans import BUSY_S, WorkerState, parent_dies_while

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_ORPHAN_WORKERS


def _grade_orphans(loader_cls: type, grade: Grade, r: Run, what: str) -> None:
    """The loader's process was SIGKILLed with its workers in a state: they exit on their own
    (without worker processes the property holds trivially: noted, passed)."""
    assert r.report is not None
    kind = workers(loader_cls)
    if r.report.outcome == "killed" and not r.report.orphan_exit_s and kind != "processes":
        grade.note(f"holds trivially: no worker process ({kind}) to outlive it")
        return
    if r.report.outcome != "killed" or not r.report.orphan_exit_s:
        pytest.fail(
            f"setup: expected the loader's process to reach {what!r} and die; "
            f"got {r.report.outcome} {r.report.error or ''}",
            pytrace=False,
        )
    if any(not e.ok for e in r.of(0, Awaited)):
        pytest.fail(f"setup: the workers never reached {what!r}", pytrace=False)
    checks.orphans_exit(grade, r, what)


@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
@pytest.mark.parametrize(
    "state",
    [
        "idle",
        pytest.param("busy", marks=pytest.mark.quick),
        pytest.param("blocked", marks=pytest.mark.quick),
    ],
)
def test_workers_exit_after_the_loader_process_is_sigkilled(
    loader_cls: type, grade: Grade, state: WorkerState
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
    _grade_orphans(loader_cls, grade, r, f"{state} workers")


@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
def test_busy_iterable_workers_exit_after_the_loader_process_is_sigkilled(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset, each worker inside a 60 s fetch of its shard: SIGKILL the loader's
    process; every worker exits on its own (a second scenario for busy workers: another dataset
    kind, another fetch path).

    Property: NoOrphanWorkers (15 s MUST, 0.5 s SHOULD). Seed (worker loop): "watchdog =
    ManagerWatchdog()" checks the parent between tasks; a worker busy in a fetch must still
    learn of its parent's death.
    Guards: C3 NVIDIA/Megatron-LM PR #3684 (busy workers outlive their parent), C1
    pytorch/pytorch#5736.
    """
    plan = Plan(
        shards=(4, 4),
        faults=(Sleep(EVERY, BUSY_S),),
        kwargs={"num_workers": 2, "prefetch_factor": 2, "batch_size": 1},
        leave={0: Leave("kill_parent", 0)},
        before_leave=Await("fetch", count=2),
    )
    r = play(loader_cls, plan, deadline_s=60.0, parent_dies=True, orphan_grace_s=MUST_BOUND_S)
    _grade_orphans(loader_cls, grade, r, "busy iterable")
