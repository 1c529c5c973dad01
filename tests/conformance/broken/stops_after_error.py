"""Bug: the first error ends the epoch: it is raised, then StopIteration (IterationTerminates:
iteration goes on after a dataset error)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Stop(Relay):
    failed = False

    def __next__(self) -> Any:
        if self.failed:
            raise StopIteration
        try:
            return next(self.it)
        except StopIteration:
            raise
        except Exception:
            self.failed = True
            raise


class Loader(Wrapped):
    relay = _Stop
