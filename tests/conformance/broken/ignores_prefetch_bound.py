"""Bug: prefetches four times the window it was given (PrefetchBound)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("num_workers", 0) > 0:
            kwargs = {**kwargs, "prefetch_factor": 4 * kwargs.get("prefetch_factor", 2)}
        return kwargs
