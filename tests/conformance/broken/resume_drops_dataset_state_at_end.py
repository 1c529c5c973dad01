"""Bug: a state taken after an epoch's StopIteration names the next epoch but keeps nothing the
user's dataset, sampler or RNG did in the epochs before: a dataset's epoch counter advanced at
its iteration's end restarts at 0 (CheckpointIsHandedOut, ResumeEquivalence; the reference's
until 2026-11-28)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.ended():
            state["dropped"] = True
        return state

    def replayed(self) -> int:
        return 0 if self.position.get("dropped") else super().replayed()  # the bug
