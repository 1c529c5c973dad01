"""Bug: the loaded position is skipped at every later iter(), not once: a state taken after the
resume, and every later epoch, lose the batches the first resume skipped (ResumeAdvances: the
post-resume epochs cover only the remainder of the interrupted one; K7
meta-pytorch/data#1437)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    sticky = 0

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.sticky = int(state["taken"])  # the bug: never cleared

    def skipped(self) -> int:
        return max(super().skipped(), self.sticky)
