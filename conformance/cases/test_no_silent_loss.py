"""NoSilentLoss (MUST): no task is passed over: every task before the one handed out (or
StopIteration) was handed out, as its batch or its error, or retired by its worker's exhaustion."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    MUST_BOUND_S,
    Die,
    Grade,
    checks,
    kwargs,
    play,
    spec_property,
    workers,
)
from loaderspec.conformance.harness.drawn import MORE_EXAMPLES, QUICK_EXAMPLES, check_drawn, played
from loaderspec.conformance.harness.schedules import DEADLINE_S, DrawnFault, judge, picks, schedules

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_SILENT_LOSS


@pytest.mark.quick
@spec_property(PROP)
def test_epoch_does_not_end_quietly_after_worker_death(loader_cls: type, grade: Grade) -> None:
    """Map-style: after a worker died, iterating on never ends in StopIteration with items lost.

    Property: NoSilentLoss. Seed (dataloader.py, _next_data): "rcvd_idx" waits for the task it
    owes; a task whose worker is gone can only be reported, never skipped.
    Guards: H3 pytorch test_error_workers semantics (after a worker fault the loader must not
    lose other batches), B1 pytorch PR #15665 (worker death detection),
    facebookresearch/spdl PR #1576 (SPDL's subprocess pipeline dropped items with no error).
    """
    r = play(
        loader_cls,
        deadline_s=90.0,
        n=12,
        faults=(Die(5),),
        max_errors=6,
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.no_silent_loss(grade, r, set(range(12)))
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_iterable_epoch_does_not_end_quietly_after_worker_death(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset: a worker killed mid-shard is reported, not treated as exhausted.

    Property: NoSilentLoss. Seed (worker loop): only "_IterableDatasetStopIteration" retires a
    worker; a worker that vanished has not finished its shard.
    Guards: D4 pytorch PR #19228 (only a worker's exhaustion retires it from the round-robin).
    """
    r = play(
        loader_cls,
        deadline_s=90.0,
        shards=(3, 8),
        faults=(Die(2),),
        max_errors=6,
        kwargs=kwargs(2, 1, batch_size=1),
    )
    items = {k for k in range(3)} | {1_000_000 + k for k in range(8)}
    checks.no_silent_loss(grade, r, items)
    checks.nothing_left(grade, r)


ALL_MUSTS = (
    PropertyName.NO_DUPLICATE_DELIVERY,
    PropertyName.IN_ORDER_DELIVERY,
    PropertyName.EXACTLY_ONCE,
    PropertyName.WORKER_DEATH_RAISES,
    PropertyName.ITERATION_TERMINATES,
    PropertyName.NO_ORPHAN_WORKERS,
    PropertyName.SHUTDOWN_COMPLETES,
)


def _drawn_faults(loader_cls: type, grade: Grade, examples: int) -> None:
    def one(schedule: DrawnFault) -> None:
        parent_dies = schedule.fault == "parent_kill"
        r = play(
            loader_cls,
            schedule.plan(),
            deadline_s=DEADLINE_S,
            parent_dies=parent_dies,
            orphan_grace_s=MUST_BOUND_S if parent_dies else 1.0,
            leaks=False,
            skip_refused=False,
        )
        judge(grade, schedule, played(r))

    kind = workers(loader_cls)
    last = check_drawn(schedules(kind), one, examples=examples, picks=picks(kind), shrink_s=0)
    if last.fault != "parent_kill":
        checks.nothing_left(grade, play(loader_cls, last.plan(), deadline_s=DEADLINE_S))


@pytest.mark.quick
@spec_property(PROP, *ALL_MUSTS)
def test_drawn_fault_schedules_keep_every_must(loader_cls: type, grade: Grade) -> None:
    """A few drawn fault schedules (a worker killed in a fetch, in collate, idle or blocked
    writing; a hang with a timeout; a raise; the loader's process killed; at a drawn item of a
    drawn epoch): every MUST property the run can show holds on each.

    Property: NoSilentLoss, and the other MUSTs (no duplicate, order, the death's error, the
    timeout's error, no orphan, nothing left). Seed (NOTE, 3): "we must ensure that each process
    will exit even the process that should send/receive data to/from it were killed" - at any
    point, not only at the hand-picked ones. The failing schedule is printed as a Plan to replay.
    Guards: B1 pytorch PR #11985 (faults at any point of the protocol), A7
    pytorch/pytorch#27278 (hangs found only by repeated runs).
    """
    _drawn_faults(loader_cls, grade, QUICK_EXAMPLES + 1)


@spec_property(PROP, *ALL_MUSTS)
def test_more_drawn_fault_schedules_keep_every_must(loader_cls: type, grade: Grade) -> None:
    """More drawn fault schedules than the quick selection plays: every MUST property holds on
    each (as in test_drawn_fault_schedules_keep_every_must).

    Property: NoSilentLoss and the other MUSTs. Seed (NOTE, 3): each process exits whoever
    was killed.
    Guards: B1 pytorch PR #11985, A7 pytorch/pytorch#27278.
    """
    _drawn_faults(loader_cls, grade, MORE_EXAMPLES)
