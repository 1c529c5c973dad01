"""Bug: a state taken after an epoch's StopIteration still names that epoch, from its start: the
resumed loader hands the finished epoch out again (CheckpointIsHandedOut: an epoch repeated;
K7 meta-pytorch/data#1437 before PR #1439)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    ended = False

    def __iter__(self) -> Any:
        self.ended = False
        return super().__iter__()

    def epoch_ended(self) -> None:
        super().epoch_ended()
        self.ended = True

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.ended and self.loaded is None:
            state["epoch"] -= 1  # the bug: the finished epoch is not counted as over
        return state
