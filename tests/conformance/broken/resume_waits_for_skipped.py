"""Bug: a resumed iterator counts the batches its state skipped as outstanding: once the rest of
the epoch is handed out it waits for them, which never come, until its timeout raises (a hang
without one) (ResumeNeverStalls)."""

from __future__ import annotations

import threading
from typing import Any

from broken._stateful import Stateful, StatefulRelay
from broken._wrap import Relay


class StallingRelay(StatefulRelay):
    loader: Loader

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except StopIteration:
            if not self.loader.owed:
                raise
        # the bug: waits for the skipped batches as for batches in flight
        threading.Event().wait(self.loader.timeout or None)
        raise RuntimeError(f"DataLoader timed out after {self.loader.timeout} seconds")


class Loader(Stateful):
    relay = StallingRelay

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.timeout = float(kwargs.get("timeout") or 0)
        self.owed = 0

    def __iter__(self) -> Relay:
        resumed = self.loaded is not None
        relay = super().__iter__()
        self.owed = self.skipped() if resumed else 0
        return relay
