"""RanksShareEpochPermutation (MUST): after `sampler.set_epoch(e)` every rank hands out its
sampler's order for epoch e: the ranks cut one permutation per epoch, a new one each epoch.

Checked by the suite only, on a gloo group of ranks (`conformance.harness.ranks`).
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.ranks import (
    EVEN,
    PARTITION,
    PERMUTATION,
    RankPlan,
    even_batches,
    nothing_left,
    partition,
    play_ranks,
    same_permutation,
)


@pytest.mark.quick
@pytest.mark.iterators(2 * 3)  # 2 ranks, 3 epochs each
@spec_property(PERMUTATION, PARTITION, EVEN)
def test_set_epoch_reshuffles_every_rank_alike_with_persistent_workers(
    loader_cls: type, grade: Grade
) -> None:
    """2 ranks, shuffled DistributedSampler, 2 persistent workers each, 3 epochs with set_epoch:
    every epoch each rank hands out its sampler's new order (workers kept across epochs must not
    keep an old one).

    Property: RanksShareEpochPermutation. Seed (distributed.py, DistributedSampler): "calling
    the set_epoch() method at the beginning of each epoch before creating the DataLoader
    iterator is necessary to make shuffling work properly across multiple epochs. Otherwise,
    the same ordering will be always used."
    Guards: E3 huggingface/datasets#6673 (persistent workers replay the same shuffle every
    epoch; DistributedSampler without set_epoch: the same order every epoch).
    """
    plan = RankPlan(
        world=2,
        n=16,
        seed=7,
        kwargs=kwargs(2, 2, batch_size=2, persistent_workers=True),
        epochs=3,
    )
    r = play_ranks(loader_cls, plan)
    same_permutation(grade, r)
    partition(grade, r)
    even_batches(grade, r)
    nothing_left(grade, r)
