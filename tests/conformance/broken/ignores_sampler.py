"""Bug: an explicit sampler is ignored; batches come in dataset order (ExactlyOnce: not the
batches torch gives)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.pop("sampler", None)  # the bug
        return kwargs
