"""InOrderDelivery when the batch in turn is late by far more than any skew: a loader that hands
out a later batch to avoid stalling ("anti-stall") fails here deterministically, not by timing
luck (the later batches are ready long before the late one)."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    Grade,
    SkewWorker,
    Sleep,
    checks,
    kwargs,
    play,
    spec_property,
)

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.IN_ORDER_DELIVERY
LATE_S = 2.0  # the first batch's delay: > 10 x any stall threshold worth having
SKEW_S = 0.5  # a slow worker's delay per item


@pytest.mark.quick
@spec_property(PROP)
def test_a_late_first_batch_is_waited_for_not_overtaken(loader_cls: type, grade: Grade) -> None:
    """Map-style, 2 workers, in_order=True: item 0 takes 2 s, every other item none; the batches
    still come out 0, 1, 2, ... (the later ones wait in the reorder buffer).

    Property: InOrderDelivery. Seed (dataloader.py, _next_data): "store out-of-order samples" -
    a result that is not the one in turn is kept until its turn.
    Guards: D6 pytorch PR #14611 (head-of-line blocking is what in_order=True means; in_order=
    False is the opt-out).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Sleep(0, LATE_S),),
        kwargs=kwargs(2, 2, batch_size=1, in_order=True),
    )
    expected = [[i] for i in range(8)]
    if r.batches() != expected:
        grade.fail(PROP, f"batches {expected} (item 0 {LATE_S:g} s late)", f"{r.batches()}")
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_a_slow_iterable_worker_is_not_overtaken(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, 2 workers, in_order=True: worker 0 takes 0.5 s per item, worker 1 none;
    batches still alternate worker 0, worker 1 (round robin), never two of worker 1's in a row.

    Property: InOrderDelivery. Seed (dataloader.py, _try_put_index): tasks go round robin to
    the active workers and are handed out by task index.
    Guards: D4 pytorch PR #19228 (per-worker order, round robin), D6 pytorch PR #14611.
    """
    r = play(
        loader_cls,
        shards=(3, 3),
        faults=(SkewWorker(0, SKEW_S),),
        kwargs=kwargs(2, 2, batch_size=1, in_order=True),
    )
    expected = [[v] for k in range(3) for v in (k, 1_000_000 + k)]
    if r.batches() != expected:
        grade.fail(PROP, f"batches {expected} (worker 0 {SKEW_S:g} s per item)", f"{r.batches()}")
    checks.nothing_left(grade, r)
