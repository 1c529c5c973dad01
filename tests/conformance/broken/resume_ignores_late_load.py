"""Bug: load_state_dict() is silently ignored once iter() or state_dict() was called on the
loader (LoadIsNeverIgnored: the resumed loader starts from the beginning)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    touched = False

    def __iter__(self) -> Any:
        self.touched = True
        return super().__iter__()

    def state_dict(self) -> dict[str, Any]:
        self.touched = True
        return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.touched:
            return  # the bug
        super().load_state_dict(state)
