"""NoDuplicateDelivery (MUST): no task is handed out twice within an epoch, in either ordering
mode."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, SkewWorker, checks, kwargs, play, spec_property

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_DUPLICATE_DELIVERY


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
@pytest.mark.parametrize(("workers", "prefetch"), [(2, 1), (3, 2)])
def test_out_of_order_delivery_is_a_permutation(
    loader_cls: type, grade: Grade, workers: int, prefetch: int
) -> None:
    """in_order=False with worker 0 slow: the batches are a permutation of the sampler's.

    Property: NoDuplicateDelivery. Seed (dataloader.py, _next_data, in_order=False): a result
    that arrives early is handed out at once and its "task_info" entry removed.
    Guards: D6 pytorch PR #141833 (in_order=False bookkeeping: lost or duplicated batches).
    """
    r = play(
        loader_cls,
        n=16,
        faults=(SkewWorker(0, 0.04),),
        kwargs=kwargs(workers, prefetch, batch_size=2, in_order=False),
    )
    expected = [[i, i + 1] for i in range(0, 16, 2)]
    got = r.batches()
    dups = sorted({tuple(b) for b in got if got.count(b) > 1})
    if dups:
        grade.fail(PROP, "each batch once", f"duplicated {dups}")
    if sorted(got) != expected:
        grade.fail(PropertyName.EXACTLY_ONCE, f"a permutation of {expected}", f"{got}")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_iterable_out_of_order_delivery_is_a_permutation(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, in_order=False, skewed: every item exactly once.

    Property: NoDuplicateDelivery. Seed (dataloader.py): out-of-order delivery still retires each
    task once, exhausted workers included.
    Guards: D6 pytorch PR #142324 (in_order=False with IterableDataset).
    """
    r = play(
        loader_cls,
        shards=(6, 3),
        faults=(SkewWorker(0, 0.03),),
        kwargs=kwargs(2, 2, batch_size=2, in_order=False),
    )
    items = r.items()
    expected = sorted([*range(6), *(1_000_000 + k for k in range(3))])
    if len(items) != len(set(items)):
        grade.fail(PROP, "each item once", f"{sorted(items)}")
    if sorted(items) != expected:
        grade.fail(PropertyName.EXACTLY_ONCE, f"{expected}", f"{sorted(items)}")
    checks.nothing_left(grade, r)
