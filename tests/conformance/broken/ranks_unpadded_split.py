"""Bug: a DistributedSampler is replaced by the rank's stride of the epoch's order with no
padding (`indices[rank::world]`), as hand-rolled sharding does; with a length that is not a
multiple of the ranks, rank 0 gets one batch more than the others (RanksEvenBatchCounts: DDP's
all_reduce would hang on the extra step)."""

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler
from torch.utils.data.distributed import DistributedSampler

from broken._wrap import Wrapped


class _Unpadded(Sampler[int]):
    def __init__(self, inner: DistributedSampler) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[int]:
        whole = DistributedSampler(
            self.inner.dataset,
            num_replicas=1,
            rank=0,
            shuffle=self.inner.shuffle,
            seed=self.inner.seed,
        )
        whole.set_epoch(self.inner.epoch)
        return iter(list(whole)[self.inner.rank :: self.inner.num_replicas])  # the bug: no pad

    def __len__(self) -> int:
        return len(range(self.inner.rank, len(self.inner.dataset), self.inner.num_replicas))


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        sampler = kwargs.get("sampler")
        if isinstance(sampler, DistributedSampler):
            kwargs["sampler"] = _Unpadded(sampler)
        return kwargs
