"""Bug: the loader goes on sending an epoch's tasks after the epoch ended (NoDispatchAfterEnd).
Left early (`del it`, a `break`), the iterator runs the rest of its epoch through the workers
before it lets go, the batches thrown away; after StopIteration, the next next() call starts the
next pass over the dataset ahead of time (and still raises StopIteration). Nothing more is
handed out: only the dataset sees it."""

from __future__ import annotations

import contextlib
from typing import Any

from loaderspec.reference import DataLoader as Reference

from broken._wrap import Relay, Wrapped


class _GoesOn(Relay):
    ended = False
    ahead: Any = None  # the next pass, started after the end

    def __next__(self) -> Any:
        if self.ended and self.ahead is None:
            # The bug: a pass the user never asked for; its first batch is loaded and kept.
            self.ahead = iter(Reference(self.loader.dataset, **self.loader.kwargs))
            next(self.ahead)
        try:
            return next(self.it)
        except StopIteration:
            self.ended = True
            raise

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            for _ in self.it:  # the bug: the rest of the epoch is fetched, then dropped
                pass


class Loader(Wrapped):
    relay = _GoesOn

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.dataset, self.kwargs = dataset, kwargs
