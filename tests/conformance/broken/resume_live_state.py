"""Bug: state_dict() returns the loader's own live position, which goes on changing as batches
are handed out (SnapshotIsImmutable: a state taken earlier resumes where the loader is now)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def state_dict(self) -> dict[str, Any]:
        return self.loaded if self.loaded is not None else self.position  # the bug: no copy
