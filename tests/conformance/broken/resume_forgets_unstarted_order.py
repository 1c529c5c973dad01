"""Bug: a state taken between an epoch's `iter()` and its first batch holds no shuffle order of
that epoch's: the resumed loader hands the epoch out in the first epoch's order
(ResumeEquivalence; the reference's own bug until 2026-11-28, where one process draws the order
at the first `next()` and the state then carried no generator state)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.loaded is None and self.open and state["taken"] == 0:
            state["seed"] -= state["epoch"]  # the bug: the order drawn as if in epoch 0
        return state
