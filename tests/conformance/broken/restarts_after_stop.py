"""Bug: next() after StopIteration starts a new epoch on the same iterator
(NoDeliveryAfterShutdown)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Restart(Relay):
    def __next__(self) -> Any:
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader.inner)  # the bug: the next call hands out a new epoch
            raise


class Loader(Wrapped):
    relay = _Restart
