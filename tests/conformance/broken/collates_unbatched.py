"""Bug: with batch_size=None (no automatic batching) each item is collated as a batch of one
instead of converted (`tensor([i])` where torch hands out `tensor(i)`): ExactlyOnce, not the
batches torch gives."""

from typing import Any

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if "batch_size" in kwargs and kwargs["batch_size"] is None and not kwargs.get("collate_fn"):
            kwargs["batch_size"] = 1  # the bug: batched (collated), not converted
        return kwargs
