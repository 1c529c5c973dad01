"""Bug: an error from next() is dropped and the next batch returned instead (errors never reach
the user: IterationTerminates, WorkerDeathRaises, NoSilentLoss)."""

from typing import Any

from broken._wrap import Relay, Wrapped

MAX_SWALLOWED = 50  # a fail-stop iterator raises for ever: give up and end the epoch then


class _Swallow(Relay):
    def __next__(self) -> Any:
        for _ in range(MAX_SWALLOWED):
            try:
                return next(self.it)
            except StopIteration:
                raise
            except Exception:
                continue
        raise StopIteration


class Loader(Wrapped):
    relay = _Swallow
