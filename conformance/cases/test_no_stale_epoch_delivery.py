"""NoStaleEpochDelivery (MUST): a batch fetched for an earlier epoch is never handed out in a
later one."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    Grade,
    Leave,
    SkewWorker,
    checks,
    kwargs,
    play,
    spec_property,
)

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_STALE_EPOCH_DELIVERY


def _check_epoch(grade: Grade, pairs: list[tuple[int, int]], epoch: int, n: int) -> None:
    stale = [p for p in pairs if p[1] != epoch]
    if stale:
        grade.fail(PROP, f"only items fetched in epoch {epoch}", f"stale items {stale[:6]}")
    if sorted(i for i, _ in pairs) != list(range(n)):
        grade.fail(
            PropertyName.EXACTLY_ONCE, f"items 0..{n - 1} in epoch {epoch}", f"{sorted(pairs)}"
        )


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
@pytest.mark.parametrize("in_order", [True, False])
def test_abandoned_epoch_leaves_nothing_stale_for_the_next(
    loader_cls: type, grade: Grade, in_order: bool
) -> None:
    """Persistent workers: take 1 batch of epoch 0, start epoch 1: it is complete and holds only
    items fetched for epoch 1.

    Property: NoStaleEpochDelivery. Seed (dataloader.py, _reset): "We resume the prefetching in
    case it was enabled" after draining until every worker acknowledged "_ResumeIteration".
    Guards: E5 PaddlePaddle/Paddle#48964 (next epoch after an abandoned one), E1
    pytorch/pytorch#48370 (second iter() with persistent workers).
    """
    r = play(
        loader_cls,
        n=10,
        epochs=2,
        tag_epochs=True,
        faults=(SkewWorker(1, 0.02),),
        leave={0: Leave("drop", 1)},
        kwargs=kwargs(2, 2, batch_size=2, in_order=in_order, persistent_workers=True),
    )
    _check_epoch(grade, r.items(1), 1, 10)
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.EXACTLY_ONCE)
@pytest.mark.parametrize("persistent", [True, False])
def test_many_epochs_are_each_complete_and_fresh(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """Five epochs, every other one abandoned after a batch: each finished epoch is complete.

    Property: NoStaleEpochDelivery. Seed (DataLoader.__iter__): "the iterator is only created
    once in the lifetime of the DataLoader object so that workers can be reused".
    Guards: E3 huggingface/datasets#6673 (persistent workers replay an old epoch's state).
    """
    r = play(
        loader_cls,
        n=6,
        epochs=5,
        tag_epochs=True,
        leave={1: Leave("drop", 1), 3: Leave("break", 2)},
        kwargs=kwargs(2, 1, batch_size=2, persistent_workers=persistent),
    )
    for epoch in (0, 2, 4):
        _check_epoch(grade, r.items(epoch), epoch, 6)
    for epoch in (1, 3):
        stale = [p for p in r.items(epoch) if p[1] != epoch]
        if stale:
            grade.fail(PROP, f"only epoch-{epoch} items", f"stale {stale}")
    checks.nothing_left(grade, r)
