"""Bug: a state taken between `iter()` and an epoch's first batch holds no state of an
IterableDataset that saves its own: the resumed loader hands out 0 batches of that epoch
(ResumeEquivalence; the reference's until 2026-11-28, with a dataset that is its own iterator)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        unstarted = self.loaded is None and self.open and state["taken"] == 0
        if unstarted and self.iterable and self.dataset_saves:
            state["taken"] = 2**31  # the bug: the epoch looks handed out
        return state
