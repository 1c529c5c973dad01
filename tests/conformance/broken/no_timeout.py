"""Bug: ignores ``timeout`` (IterationTerminates: a hung worker hangs next() for ever)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "timeout": 0}
