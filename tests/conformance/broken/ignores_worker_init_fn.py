"""Bug: never calls worker_init_fn (TypeOK: the worker's start-up protocol)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "worker_init_fn": None}
