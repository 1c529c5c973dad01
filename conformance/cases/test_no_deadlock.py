"""NoDeadlock (MUST): some step is always possible until the run has ended."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, checks, kwargs, play, spec_property
from loaderspec.faultinject.events import Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_DEADLOCK


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
@pytest.mark.parametrize("in_order", [True, False])
def test_uneven_iterable_shards_are_all_drained(
    loader_cls: type, grade: Grade, in_order: bool
) -> None:
    """IterableDataset, 3 workers with 5, 0 and 2 items: every item comes, then StopIteration.

    Property: NoDeadlock. Seed (dataloader.py, _next_data): an exhausted worker is marked
    unavailable ("_mark_worker_as_unavailable") and "rcvd_idx" skips its empty slots.
    Guards: D4 pytorch PR #19228 (stop asking an exhausted worker, round-robin over the rest).
    """
    r = play(
        loader_cls,
        shards=(5, 0, 2),
        kwargs=kwargs(3, 2, batch_size=2, in_order=in_order),
    )
    expected = sorted([*range(5), 2_000_000, 2_000_001])
    if sorted(r.items()) != expected or r.last() != "dropped" or not r.of(0, Stop):
        grade.fail(PROP, f"items {expected} then StopIteration", f"{sorted(r.items())}, {r.last()}")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_more_workers_than_batches_ends(loader_cls: type, grade: Grade) -> None:
    """3 workers, prefetch 3, only 2 batches: both come, then StopIteration.

    Property: NoDeadlock. Seed (dataloader.py, _try_put_index): when the sampler is exhausted
    no more tasks are sent, and the epoch ends when "tasks_outstanding" reaches 0.
    Guards: A4 pytorch/pytorch#9985 (num_workers=12 on a 10-item dataset).
    """
    r = play(loader_cls, n=4, kwargs=kwargs(3, 3, batch_size=2))
    if r.batches() != [[0, 1], [2, 3]] or not r.of(0, Stop):
        grade.fail(PROP, "[[0, 1], [2, 3]] then StopIteration", f"{r.batches()}, {r.last()}")
    checks.nothing_left(grade, r)
