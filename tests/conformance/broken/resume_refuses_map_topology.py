"""Bug: a map-style state taken with other workers is refused (with a ValueError naming both
counts), though its sampler order does not depend on them (MapResumeAnyWorkers, SHOULD:
NON-STRICT)."""

from typing import Any

from broken._stateful import Stateful


class Loader(Stateful):
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["num_workers"] != self.num_workers:  # the bug: map-style refused too
            raise ValueError(
                f"this state was taken with num_workers={state['num_workers']}; this loader has"
                f" num_workers={self.num_workers}: build it with the state's count"
            )
        super().load_state_dict(state)
