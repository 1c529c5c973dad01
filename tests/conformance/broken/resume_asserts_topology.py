"""Bug: a state taken with other workers is refused by an assert, naming nothing
(ResumeTopologyExplicit, SHOULD: NON-STRICT; torchdata 0.11's StatefulDataLoader does this)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert state["num_workers"] == self.num_workers  # the bug: an assert, no counts
        super().load_state_dict(state)
