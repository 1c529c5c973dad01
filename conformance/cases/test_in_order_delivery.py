"""InOrderDelivery (MUST): with in_order=True, batches are handed out in sampler order."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, SkewWorker, checks, kwargs, play, spec_property

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.IN_ORDER_DELIVERY


@pytest.mark.quick
@spec_property(PROP)
@pytest.mark.parametrize(("workers", "prefetch"), [(2, 1), (2, 2), (3, 2)])
def test_batches_arrive_in_sampler_order_with_skewed_workers(
    loader_cls: type, grade: Grade, workers: int, prefetch: int
) -> None:
    """Worker 0 is slow; batches still come out in sampler order.

    Property: InOrderDelivery. Seed (torch dataloader.py, _next_data): "rcvd_idx" only advances
    over the task it waits for; results that arrive early are buffered ("task_info").
    Guards: D6 pytorch PR #14611 (in-order delivery head-of-line blocks on a slow batch; the
    reorder buffer is where order is lost).
    """
    r = play(
        loader_cls,
        n=12,
        faults=(SkewWorker(0, 0.05),),
        kwargs=kwargs(workers, prefetch, batch_size=2, in_order=True),
    )
    expected = [[i, i + 1] for i in range(0, 12, 2)]
    if r.batches() != expected:
        grade.fail(PROP, f"batches {expected}", f"{r.batches()}")
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_iterable_batches_alternate_between_workers_in_order(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset with 2 workers: task i is worker i % 2's next batch, handed out in order.

    Property: InOrderDelivery. Seed (dataloader.py, _try_put_index): tasks go round-robin to the
    active workers ("worker_queue_idx"), and are handed out by task index.
    Guards: D4 pytorch PR #19228 (IterableDataset support: per-worker order, round-robin).
    """
    r = play(
        loader_cls,
        shards=(4, 4),
        faults=(SkewWorker(0, 0.05),),
        kwargs=kwargs(2, 2, batch_size=2, in_order=True),
    )
    expected = [[0, 1], [1_000_000, 1_000_001], [2, 3], [1_000_002, 1_000_003]]
    if r.batches() != expected:
        grade.fail(PROP, f"batches {expected}", f"{r.batches()}")
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_second_epoch_with_persistent_workers_is_in_order(loader_cls: type, grade: Grade) -> None:
    """Persistent workers, skewed: every one of three epochs is in sampler order.

    Property: InOrderDelivery. Seed (dataloader.py, _reset): with persistent workers the
    iterator resets "send_idx"/"rcvd_idx" and resumes the same workers for the next epoch.
    Guards: D5 pytorch/pytorch#73603 (persistent workers: later epochs not in a stable order).
    """
    r = play(
        loader_cls,
        n=8,
        epochs=3,
        faults=(SkewWorker(1, 0.03),),
        kwargs=kwargs(2, 1, batch_size=2, in_order=True, persistent_workers=True),
    )
    expected = [[i, i + 1] for i in range(0, 8, 2)]
    for epoch in range(3):
        if r.batches(epoch) != expected:
            grade.fail(PROP, f"epoch {epoch}: {expected}", f"{r.batches(epoch)}")
    checks.nothing_left(grade, r)
