"""Bug: an "anti-stall" in-order loader: when the batch in turn is 0.15 s late and a later one is
already here, the later one is handed out first (InOrderDelivery). Built on torch's DataLoader;
a skew of a few hundredths of a second never triggers it."""

from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

STALL_S = 0.15


class _Late(Exception):
    pass


class _AntiStall(_MultiProcessingDataLoaderIter):
    def _stashed(self) -> list[int]:
        return sorted(i for i, info in self._task_info.items() if len(info) == 2)

    def _get_data(self) -> Any:
        if self._in_order and not self._timeout and not self._pin_memory and self._stashed():
            ok, data = self._try_get_data(STALL_S)
            if ok:
                return data
            raise _Late
        return super()._get_data()

    def _next_data(self) -> Any:
        try:
            return super()._next_data()
        except _Late:  # the bug: hand out a later batch instead of waiting for the one in turn
            worker_id, data = self._task_info.pop(self._stashed()[0])
            return self._process_data(data, worker_id)


class Loader(DataLoader):
    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        return _AntiStall(self)
