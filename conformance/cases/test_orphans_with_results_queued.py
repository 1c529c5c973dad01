"""NoOrphanWorkers with results queued: workers that made more results than the pipe holds, and
wait for their next task, exit on their own after the loader's process dies - a loader that
flushes what it queued before exiting (a `multiprocessing.Queue`'s feeder joined at exit) never
does."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    EVERY,
    MUST_BOUND_S,
    Await,
    Die,
    Grade,
    Leave,
    Plan,
    checks,
    play,
    spec_property,
)
from loaderspec.conformance.harness import workers as worker_kind

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_ORPHAN_WORKERS


@pytest.mark.quick
@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
def test_iterable_workers_with_results_queued_exit_after_the_parent_dies(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset, 2 workers, every item bigger than a pipe: one batch is taken, then the
    loader's process is SIGKILLed while each worker has a result it cannot hand over (nobody
    reads); every worker exits on its own.

    Property: NoOrphanWorkers (15 s MUST, 0.5 s SHOULD). Seed (torch worker loop):
    "data_queue.cancel_join_thread()" - a worker must not wait at exit for results nobody reads.
    Guards: C2 GaTech-RL2/EgoVerse#682 (workers blocked on a full pipe outlive their parent).
    """
    plan = Plan(
        shards=(4, 4),
        faults=(Die(EVERY, signal=None, point="blocked_put"),),
        kwargs={"num_workers": 2, "prefetch_factor": 2, "batch_size": 1},
        leave={0: Leave("kill_parent", 1)},
        before_leave=Await("fetched", count=3),
    )
    r = play(loader_cls, plan, deadline_s=60.0, parent_dies=True, orphan_grace_s=MUST_BOUND_S)
    assert r.report is not None
    kind = worker_kind(loader_cls)
    if r.report.outcome == "killed" and not r.report.orphan_exit_s and kind != "processes":
        grade.note(f"holds trivially: no worker process ({kind}) to outlive it")
        return
    if r.report.outcome != "killed" or len(r.batches()) != 1:
        pytest.fail(
            f"setup: expected one batch, then the loader's process to die; got {r.batches()},"
            f" {r.report.outcome} {r.report.error or ''}",
            pytrace=False,
        )
    checks.orphans_exit(grade, r, "workers with results queued")
