"""RanksPartitionEveryEpoch (MUST): on every rank of a process group, each epoch hands out exactly
that rank's items; across ranks every item once (DistributedSampler's padding apart).

Checked by the suite only (the spec models one loader process): each case runs the loader on 2
or 3 ranks at once, each a process of a gloo group over loopback, with a real all_reduce per step
(`conformance.harness.ranks`).
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

from loaderspec.vocabulary import PropertyName


@pytest.mark.iterators(3 * 3)  # up to 3 ranks, 3 epochs each
@spec_property(PARTITION, EVEN, PERMUTATION)
@pytest.mark.parametrize(
    "world", [pytest.param(2, marks=pytest.mark.quick), pytest.param(3)], ids=["2", "3"]
)
def test_map_style_ranks_split_every_epoch_between_them(
    loader_cls: type, grade: Grade, world: int
) -> None:
    """2 or 3 ranks, map-style behind DistributedSampler (shuffled), 2 workers each, 3 epochs with
    set_epoch: each rank hands out exactly its sampler's items, in its order, as many batches as
    every other rank.

    Property: RanksPartitionEveryEpoch. Seed (distributed.py, DistributedSampler): "each process
    can pass a DistributedSampler instance as a DataLoader sampler, and load a subset of the
    original dataset that is exclusive to it".
    Guards: D1 pytorch/pytorch#30599 (every rank or worker reads the whole dataset: each item
    handed out several times), pytorch/pytorch#141069 (uneven per-rank batches hang DDP).
    """
    plan = RankPlan(world=world, n=13, kwargs=kwargs(2, 2, batch_size=2), epochs=3)
    r = play_ranks(loader_cls, plan)
    even_batches(grade, r)
    partition(grade, r)
    same_permutation(grade, r)
    nothing_left(grade, r)


@pytest.mark.quick
@pytest.mark.iterators(3 * 2)  # 3 ranks, 2 epochs each
@spec_property(PARTITION, EVEN)
def test_iterable_shards_by_rank_and_worker_cover_every_item_once(
    loader_cls: type, grade: Grade
) -> None:
    """3 ranks, an IterableDataset that shards itself by rank and by get_worker_info(), 2 workers
    each, 2 epochs: every item once across ranks and workers, the same batch count on every rank.

    Property: RanksPartitionEveryEpoch. Seed (dataset.py, IterableDataset): "each worker process
    will have a different copy of the dataset object, so it is often desired to configure each
    copy independently to avoid having duplicate data returned from the workers".
    Guards: D1 pytorch/pytorch#30599, huggingface/datasets#3423 (workers that do not shard on
    get_worker_info() hand each item out once per worker).
    """
    plan = RankPlan(world=3, n=24, iterable=True, kwargs=kwargs(2, 2, batch_size=2), epochs=2)
    r = play_ranks(loader_cls, plan)
    partition(grade, r)
    even_batches(grade, r)
    nothing_left(grade, r)


@pytest.mark.iterators(2 * 4)  # 2 ranks, 3 epochs and a resume each
@spec_property(PARTITION, PERMUTATION, EVEN, PropertyName.RESUME_EQUIVALENCE)
def test_each_rank_resumed_from_its_own_state_keeps_its_share(
    loader_cls: type, grade: Grade
) -> None:
    """2 ranks, shuffled DistributedSampler, 2 workers, 3 epochs; after 2 batches of epoch 1
    every rank checkpoints its loader (state_dict()), drops it and resumes a new one on the
    same rank: every epoch each rank still hands out exactly its sampler's items, in order, as
    many batches as the other (loaders without state_dict() SKIP).

    Property: RanksPartitionEveryEpoch. Seed (distributed.py, DistributedSampler): "load a
    subset of the original dataset that is exclusive to it"; across a per-rank resume too.
    Guards: K8 meta-pytorch/data#1520 (prefetched items lost or replayed on resume), K7
    meta-pytorch/data#1437.
    """
    plan = RankPlan(world=2, n=14, kwargs=kwargs(2, 2, batch_size=2), epochs=3, resume_at=(1, 2))
    r = play_ranks(loader_cls, plan)
    even_batches(grade, r)
    partition(grade, r)
    same_permutation(grade, r)
    nothing_left(grade, r)


@pytest.mark.iterators(2 * 3)  # 2 ranks, 2 epochs and a resume each
@spec_property(PARTITION, EVEN, PropertyName.RESUME_EQUIVALENCE)
def test_each_rank_resumed_iterable_keeps_its_share(loader_cls: type, grade: Grade) -> None:
    """2 ranks, an IterableDataset that shards itself by rank and by get_worker_info(), 2
    workers each, 2 epochs; after 2 batches of epoch 1 every rank checkpoints its loader, drops
    it and resumes a new one on the same rank: every item once across ranks and workers each
    epoch, the same batch count on every rank (loaders without state_dict() SKIP).

    Property: RanksPartitionEveryEpoch. Seed (dataset.py, IterableDataset): "each worker process
    will have a different copy of the dataset object"; each copy's share kept across a resume.
    Guards: K8 meta-pytorch/data#1520 (an iterable's state is per worker: prefetched samples
    discarded or replayed), D1 pytorch/pytorch#30599.
    """
    plan = RankPlan(
        world=2, n=16, iterable=True, kwargs=kwargs(2, 2, batch_size=2), epochs=2, resume_at=(1, 2)
    )
    r = play_ranks(loader_cls, plan)
    partition(grade, r)
    even_batches(grade, r)
    nothing_left(grade, r)
