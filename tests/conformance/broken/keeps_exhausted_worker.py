"""Bug: an IterableDataset worker that reported exhaustion is not retired, so tasks keep going
to it and are never answered (NoDeadlock). Subclasses torch's iterator: private, fixture only."""

from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter


class _Iter(_MultiProcessingDataLoaderIter):
    def _mark_worker_as_unavailable(self, worker_id: int, shutdown: bool = False) -> None:
        if shutdown:
            super()._mark_worker_as_unavailable(worker_id, shutdown)
        # the bug: otherwise the exhausted worker stays active


class Loader(DataLoader):
    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        return _Iter(self)
