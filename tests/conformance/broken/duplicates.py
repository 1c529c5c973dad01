"""Bug: hands out the first batch of every epoch twice (NoDuplicateDelivery)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Dup(Relay):
    first: Any = None
    taken = 0

    def __next__(self) -> Any:
        self.taken += 1
        if self.taken == 2 and self.first is not None:
            return self.first
        batch = next(self.it)
        if self.taken == 1:
            self.first = batch
        return batch


class Loader(Wrapped):
    relay = _Dup
