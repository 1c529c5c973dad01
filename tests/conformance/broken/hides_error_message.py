"""Bug: re-raises every error as a bare RuntimeError("DataLoader error"), losing type, message
and worker id (IterationTerminates, WorkerDeathRaises)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Hide(Relay):
    def __next__(self) -> Any:
        try:
            return next(self.it)
        except StopIteration:
            raise
        except Exception:
            raise RuntimeError("DataLoader error") from None


class Loader(Wrapped):
    relay = _Hide
