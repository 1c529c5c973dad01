"""Bug: silently drops the second batch of every epoch (ExactlyOnce, NoDeadlock)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Drop(Relay):
    taken = 0

    def __next__(self) -> Any:
        self.taken += 1
        if self.taken == 2:
            next(self.it)  # the bug: thrown away
        return next(self.it)


class Loader(Wrapped):
    relay = _Drop
