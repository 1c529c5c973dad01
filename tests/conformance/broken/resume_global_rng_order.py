"""Bug: `shuffle=True` without a generator: a state taken after an epoch's StopIteration holds no
state of the RNG the order is drawn from, so under the user's restart (seed, rebuild, load) the
resumed epoch comes in epoch 0's order (CheckpointIsHandedOut; the reference's until 2026-11-28)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.ended() and self.shuffled and not self.seeded:
            state["seed"] -= state["epoch"]  # the bug: the order drawn as if in epoch 0
        return state
