"""Bug: the workers do not tell the dataset who they are (`get_worker_info()` is None in them,
as in loaders whose workers are not torch's), so an IterableDataset that shards itself by worker
reads its whole rank shard in every worker (RanksPartitionEveryEpoch: each item once per
worker)."""

from typing import Any

import torch.utils.data._utils.worker as torch_worker

from broken._wrap import Wrapped


class _Anonymous:
    def __init__(self, then: Any) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        if self.then is not None:
            self.then(worker_id)
        torch_worker._worker_info = None  # the bug


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["worker_init_fn"] = _Anonymous(kwargs.get("worker_init_fn"))
        return kwargs
