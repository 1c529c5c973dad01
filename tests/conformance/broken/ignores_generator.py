"""Bug: the user's `generator` is ignored, so a seeded shuffle is not reproducible and not
torch's order (a drop-in's determinism: SHOULD, NON-STRICT; the spec gives it no property)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.pop("generator", None)  # the bug
        return kwargs
