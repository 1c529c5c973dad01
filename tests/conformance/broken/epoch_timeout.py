"""Bug: `timeout` bounds the whole epoch instead of each next(): a slow but healthy epoch raises
"timed out" once it has run longer than the timeout (IterationTerminates)."""

import time
from typing import Any

from broken._wrap import Relay, Wrapped


class _EpochTimeout(Relay):
    def __init__(self, loader: Any, it: Any) -> None:
        super().__init__(loader, it)
        self.started = time.monotonic()

    def __next__(self) -> Any:
        timeout = self.loader.timeout
        if timeout and time.monotonic() - self.started > timeout:  # the bug
            raise RuntimeError(f"DataLoader timed out after {timeout} seconds")
        return next(self.it)


class Loader(Wrapped):
    relay = _EpochTimeout

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.timeout = kwargs.get("timeout", 0)
