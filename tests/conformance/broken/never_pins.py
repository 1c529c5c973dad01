"""Bug: ignores pin_memory=True (PinThreadExitsFirst, a SHOULD: batches not pinned where it should
pin; NON-STRICT)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "pin_memory": False}
