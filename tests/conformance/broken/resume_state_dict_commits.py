"""Bug: state_dict() counts the batches in flight (the prefetch window) as handed out, in the
loader's own count too, so the state agrees with that count and not with what the user received;
a resume from it loses them (CheckpointIsReceived; ResumeEquivalence)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.window = self.num_workers * int(kwargs.get("prefetch_factor") or 2)

    def state_dict(self) -> dict[str, Any]:
        if self.open and self.position["taken"]:
            self.position["taken"] += self.window  # the bug: commits the window to its count
        return super().state_dict()
