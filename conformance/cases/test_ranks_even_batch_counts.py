"""RanksEvenBatchCounts (MUST): every rank hands out the same number of batches each epoch, so a
collective per step (DDP's all_reduce) never leaves one rank waiting for the others.

Checked by the suite only: after each batch every rank calls a real all_reduce on its gloo group;
a rank left alone in one fails it after the group's timeout (3 s), where DDP would hang until
NCCL's 30-minute timeout, and the case FAILs naming the ranks and their counts
(`conformance.harness.ranks`).
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.ranks import (
    EVEN,
    PARTITION,
    RankPlan,
    even_batches,
    nothing_left,
    partition,
    play_ranks,
)


@pytest.mark.quick
@pytest.mark.iterators(3 * 3)  # 3 ranks, 3 epochs each
@spec_property(EVEN, PARTITION)
def test_every_rank_steps_the_same_number_of_batches(loader_cls: type, grade: Grade) -> None:
    """3 ranks, 10 items (not a multiple of 3) behind DistributedSampler, batch size 1, 1 worker,
    3 epochs: every rank hands out 4 batches an epoch (the sampler pads), each step's all_reduce
    completes on every rank.

    Property: RanksEvenBatchCounts. Seed (distributed.py, DistributedSampler): "If False, the
    sampler will add extra indices to make the data evenly divisible across the replicas."
    Guards: pytorch/pytorch#141069 (uneven per-rank batch counts hang DDP's allreduce until the
    NCCL timeout), D2 pytorch/pytorch#33413 (fewer batches than len(dl) promises).
    """
    plan = RankPlan(world=3, n=10, shuffle=False, kwargs=kwargs(1, 2, batch_size=1), epochs=3)
    r = play_ranks(loader_cls, plan)
    even_batches(grade, r)
    partition(grade, r)
    nothing_left(grade, r)
