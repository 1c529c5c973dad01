"""Bug: a custom batch_sampler slips by one batch: its first batch is never handed out, and
len() agrees with the slip (ExactlyOnce: not the batches torch gives)."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("batch_sampler") is not None:
            kwargs["batch_sampler"] = list(kwargs["batch_sampler"])[1:]  # the bug
        return kwargs
