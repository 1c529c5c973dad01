"""Bug: next() fills a buffer of prefetch_factor * num_workers batches before it hands out the
first one: the first batch waits for the slowest worker (PromptFaultHandling: NON-STRICT)."""

from collections import deque
from typing import Any

from broken._wrap import Relay, Wrapped


class _ReadAhead(Relay):
    def __init__(self, loader: Any, it: Any) -> None:
        super().__init__(loader, it)
        self.buffer: deque[Any] = deque()
        self.filled = False

    def __next__(self) -> Any:
        if not self.filled:
            self.filled = True
            for _ in range(self.loader.window):  # the bug
                try:
                    self.buffer.append(next(self.it))
                except StopIteration:
                    break
        if self.buffer:
            return self.buffer.popleft()
        return next(self.it)


class Loader(Wrapped):
    relay = _ReadAhead

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        workers = kwargs.get("num_workers", 0)
        self.window = (kwargs.get("prefetch_factor") or 2) * workers
