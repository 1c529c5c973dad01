"""NoDeliveryAfterShutdown (MUST): nothing is handed out after StopIteration or a break until a new
iter() starts the next epoch: next() after the end raises StopIteration again."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, checks, kwargs, play, spec_property
from loaderspec.faultinject.events import Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_DELIVERY_AFTER_SHUTDOWN


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
@pytest.mark.parametrize("persistent", [False, True])
def test_exhausted_iterator_keeps_raising_stopiteration(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """After StopIteration, next() on the same iterator raises StopIteration again, at once.

    Property: NoDeliveryAfterShutdown. Seed (NOTE, 1): the iterator shuts its workers down "when
    its last reference is gone or it is depleted".
    Guards: D3 pytorch/pytorch#59312 (the loader kept calling __next__ after StopIteration).
    """
    r = play(
        loader_cls,
        n=6,
        calls_after_stop=3,
        kwargs=kwargs(2, 2, batch_size=2, persistent_workers=persistent),
    )
    calls = r.calls()
    stop = next((i for i, e in enumerate(calls) if isinstance(e, Stop)), None)
    if stop is None:
        grade.fail(PROP, "an epoch ending in StopIteration", f"{[e.name for e in calls]}")
        return
    after = calls[stop + 1 :]
    if len(after) != 3 or not all(isinstance(e, Stop) for e in after):
        grade.fail(
            PROP, "StopIteration on each of 3 later next() calls", f"{[e.name for e in after]}"
        )
    if r.batches() != [[0, 1], [2, 3], [4, 5]]:
        grade.fail(PropertyName.EXACTLY_ONCE, "[[0, 1], [2, 3], [4, 5]]", f"{r.batches()}")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_exhausted_iterable_shards_keep_raising_stopiteration(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset, 3 persistent workers with 3, 1 and 0 items, 2 epochs: after each epoch's
    StopIteration, three more next() calls raise StopIteration too (no shard's item, late or
    re-read, comes out of them), and the next iter() hands out every item again.

    Property: NoDeliveryAfterShutdown. Seed (dataloader.py, _next_data): once no worker is
    active, "if not self._persistent_workers: self._shutdown_workers(); raise StopIteration".
    Guards: D3 pytorch/pytorch#59312 (the loader kept calling __next__ after StopIteration), D4
    pytorch PR #19228 (workers exhausted at different times).
    """
    r = play(
        loader_cls,
        shards=(3, 1, 0),
        epochs=2,
        calls_after_stop=3,
        kwargs=kwargs(3, 2, batch_size=1, persistent_workers=True),
    )
    first = sorted(r.items(0))
    for epoch in (0, 1):
        calls = r.calls(epoch)
        stop = next((i for i, e in enumerate(calls) if isinstance(e, Stop)), None)
        if stop is None:
            grade.fail(PROP, f"epoch {epoch} to end in StopIteration", f"{[e.name for e in calls]}")
            return
        after = calls[stop + 1 :]
        if len(after) != 3 or not all(isinstance(e, Stop) for e in after):
            grade.fail(
                PROP,
                f"StopIteration on each of 3 next() calls after epoch {epoch}'s end",
                f"{[e.name for e in after]}",
            )
        if len(first) != 4 or sorted(r.items(epoch)) != first:
            grade.fail(
                PropertyName.EXACTLY_ONCE,
                f"the 4 items {first} in epoch {epoch}",
                f"{r.items(epoch)}",
            )
    checks.nothing_left(grade, r)
