"""Bug: swaps every pair of consecutive batches (InOrderDelivery)."""

from collections import deque
from typing import Any

from broken._wrap import Relay, Wrapped


class _Swap(Relay):
    def __init__(self, loader: Any, it: Any) -> None:
        super().__init__(loader, it)
        self.out: deque[Any] = deque()

    def __next__(self) -> Any:
        if self.out:
            return self.out.popleft()
        first = next(self.it)
        try:
            second = next(self.it)
        except StopIteration:
            return first
        self.out.append(first)
        return second


class Loader(Wrapped):
    relay = _Swap
