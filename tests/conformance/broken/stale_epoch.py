"""Bug: reads one batch ahead and, when an epoch is abandoned, hands the read-ahead batch out at
the start of the next epoch (NoStaleEpochDelivery)."""

from collections import deque
from typing import Any

from broken._wrap import Relay, Wrapped

_NONE = object()


class _ReadAhead(Relay):
    def __init__(self, loader: Any, it: Any) -> None:
        super().__init__(loader, it)
        self.out: deque[Any] = deque(loader.leftover)  # the bug: last epoch's read-ahead
        loader.leftover = []
        self.ahead: Any = _NONE

    def __next__(self) -> Any:
        if self.out:
            return self.out.popleft()
        if self.ahead is _NONE:
            current = next(self.it)
        else:
            current, self.ahead = self.ahead, _NONE
        self.loader.leftover = []
        try:
            self.ahead = next(self.it)
            self.loader.leftover = [self.ahead]
        except StopIteration:
            self.ahead = _NONE
        return current


class Loader(Wrapped):
    relay = _ReadAhead

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.leftover: list[Any] = []
