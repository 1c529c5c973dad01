"""Persistent workers between epochs: an abandoned IterableDataset epoch leaves nothing of its
position to the next (ExactlyOnce), and a worker that dies while the workers sit idle between
epochs makes the next epoch raise or complete, never hang (WorkerDeathRaises)."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    NO_WORKER_TO_KILL,
    Grade,
    Leave,
    checks,
    kwargs,
    needs_worker_processes,
    play,
    spec_property,
)
from loaderspec.faultinject.driver import Run
from loaderspec.faultinject.events import Error, Stop

from loaderspec.vocabulary import PropertyName

SHARD = 1_000_000  # FaultyIterable: item k of shard w is w * SHARD + k


def _whole_epoch(grade: Grade, r: Run, epoch: int, shards: tuple[int, ...]) -> None:
    want = sorted(w * SHARD + k for w, length in enumerate(shards) for k in range(length))
    got = sorted(r.items(epoch))
    if got != want or not r.of(epoch, Stop) or r.of(epoch, Error):
        grade.fail(
            PropertyName.EXACTLY_ONCE,
            f"epoch {epoch} after an abandoned one: every item once ({want}) then StopIteration",
            f"{got} then {r.last(epoch)}",
        )


@pytest.mark.quick
@spec_property(PropertyName.EXACTLY_ONCE, PropertyName.NO_STALE_EPOCH_DELIVERY)
def test_abandoned_iterable_epoch_leaves_the_next_whole(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, 2 persistent workers, 3 epochs: epoch 0 left by `break` after one batch,
    epoch 1 by `del` after two; epoch 2 hands out every item of every shard once, and epoch 1
    starts where an epoch starts (each worker's iterator made afresh, not resumed).

    Property: ExactlyOnce. Seed (worker loop, _ResumeIteration): "fetcher = _DatasetKind.create_
    fetcher(...)": a resumed persistent worker builds a new iterator of its dataset.
    Guards: D5 pytorch/pytorch#73603 (persistent workers carry state across epochs).
    """
    shards = (6, 6)
    r = play(
        loader_cls,
        shards=shards,
        epochs=3,
        leave={0: Leave("break", 1), 1: Leave("drop", 2)},
        kwargs=kwargs(2, 1, batch_size=2, persistent_workers=True, in_order=True),
    )
    first = [[0, 1], [SHARD, SHARD + 1]]
    if r.batches(1) != first:
        grade.fail(
            PropertyName.EXACTLY_ONCE,
            f"epoch 1 (after epoch 0 was left) starting afresh: {first}",
            f"{r.batches(1)}",
        )
    _whole_epoch(grade, r, 2, shards)
    checks.nothing_left(grade, r)


def _raised_or_whole(grade: Grade, r: Run, epoch: int, whole: int) -> None:
    """WorkerDeathRaises: the epoch after the idle worker's death raised (within the bounds)
    or handed out all `whole` batches then StopIteration (a loader that restarts workers)."""
    errors = r.of(epoch, Error)
    if errors:
        grade.bounded(
            PropertyName.WORKER_DEATH_RAISES, "death_reported_s", errors[0].dt, "idle death raised"
        )
        return
    if not r.of(epoch, Stop) or len(r.batches(epoch)) != whole:
        grade.fail(
            PropertyName.WORKER_DEATH_RAISES,
            f"epoch {epoch} after a worker died between epochs: an error, or {whole} batches"
            " then StopIteration",
            f"{len(r.batches(epoch))} batches then {r.last(epoch)}",
        )
    grade.note(f"epoch {epoch} completed after the idle worker's death (workers restarted)")


@pytest.mark.quick
@spec_property(
    PropertyName.WORKER_DEATH_RAISES, PropertyName.ITERATION_TERMINATES, PropertyName.EXACTLY_ONCE
)
def test_death_between_persistent_epochs_is_reported_by_the_next(
    loader_cls: type, grade: Grade
) -> None:
    """Map-style, 2 persistent workers: epoch 0 runs to its end, a worker is SIGKILLed while both
    sit idle, then the next epoch's iter()/next() raises an error (or completes), never hangs.

    Property: WorkerDeathRaises. Seed (dataloader.py, _reset): the resume waits for every
    worker's acknowledgement through "_get_data()", whose status checks see a dead worker.
    Guards: B1 pytorch/pytorch#16608 (hangs after a worker kill).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=8,
        epochs=2,
        kill_worker_before_epoch=1,
        stop_at_fatal=True,
        kwargs=kwargs(2, 2, batch_size=2, persistent_workers=True),
        must=PropertyName.WORKER_DEATH_RAISES,
    )
    if r.batches(0) != [[0, 1], [2, 3], [4, 5], [6, 7]] or not r.of(0, Stop):
        grade.fail(PropertyName.EXACTLY_ONCE, "epoch 0 whole", f"{r.batches(0)} then {r.last(0)}")
    _raised_or_whole(grade, r, 1, 4)
    checks.nothing_left(grade, r)


@spec_property(PropertyName.WORKER_DEATH_RAISES, PropertyName.ITERATION_TERMINATES)
def test_death_after_an_abandoned_iterable_epoch_is_reported(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset, 2 persistent workers: epoch 0 left by `break` after one batch, a worker
    SIGKILLed before the next iter(): epoch 1 raises an error (or completes), never hangs.

    Property: WorkerDeathRaises. Seed (worker loop): "_ResumeIteration ... resume_iteration_cnt",
    acknowledged by every worker, the dead one never does.
    Guards: B1 pytorch/pytorch#16608, D5 pytorch/pytorch#73603.
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        shards=(4, 4),
        epochs=2,
        leave={0: Leave("break", 1)},
        kill_worker_before_epoch=1,
        stop_at_fatal=True,
        kwargs=kwargs(2, 1, batch_size=2, persistent_workers=True),
        must=PropertyName.WORKER_DEATH_RAISES,
    )
    _raised_or_whole(grade, r, 1, 4)
    checks.nothing_left(grade, r)
