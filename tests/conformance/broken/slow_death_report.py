"""Bug: holds a worker-death error for 2 s before raising it (PromptFaultHandling: NON-STRICT)."""

import threading
from typing import Any

from broken._wrap import Relay, Wrapped

DELAY_S = 2.0


class _Slow(Relay):
    def __next__(self) -> Any:
        try:
            return next(self.it)
        except RuntimeError as exc:
            if "worker" in str(exc).lower():
                threading.Event().wait(DELAY_S)  # the bug: a slow status check
            raise


class Loader(Wrapped):
    relay = _Slow
