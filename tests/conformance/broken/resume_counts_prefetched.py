"""Bug: a mid-epoch state counts the batches dispatched to the workers (handed out plus the
prefetch window), not those handed out: the resumed loader skips the prefetched ones
(CheckpointIsHandedOut, ResumeEquivalence: items lost; K8 meta-pytorch/data#1520)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.window = self.num_workers * int(kwargs.get("prefetch_factor") or 2)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if state["taken"]:
            state["taken"] += self.window  # the bug: what was sent, not what was handed out
        return state
