"""NoSilentLoss (MUST): no task is passed over: every task before the one handed out (or
StopIteration) was handed out, as its batch or its error, or retired by its worker's exhaustion."""

from __future__ import annotations

import pytest

from conformance.harness import Die, Grade, checks, kwargs, play

PROP = "NoSilentLoss"


@pytest.mark.quick
@pytest.mark.spec_property(PROP)
def test_epoch_does_not_end_quietly_after_worker_death(loader_cls: type, grade: Grade) -> None:
    """Map-style: after a worker died, iterating on never ends in StopIteration with items lost.

    Property: NoSilentLoss. Seed (dataloader.py, _next_data): "rcvd_idx" waits for the task it
    owes; a task whose worker is gone can only be reported, never skipped.
    Guards: H3 pytorch test_error_workers semantics (after a worker fault the loader must not
    lose other batches), B1 pytorch PR #15665 (worker death detection).
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


@pytest.mark.spec_property(PROP)
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
