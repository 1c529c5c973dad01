"""Bug: after reporting a worker death once, every later next() blocks for ever
(FailStopAfterFatalError, IterationTerminates)."""

import threading
from typing import Any

from broken._wrap import Relay, Wrapped


class _Hang(Relay):
    failed = False

    def __next__(self) -> Any:
        if self.failed:
            threading.Event().wait()  # the bug: waits for a worker that is gone
        try:
            return next(self.it)
        except RuntimeError as exc:
            self.failed = "worker" in str(exc).lower()
            raise


class Loader(Wrapped):
    relay = _Hang
