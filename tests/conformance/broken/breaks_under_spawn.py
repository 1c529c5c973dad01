"""Bug: wraps collate_fn in a local closure, which spawn and forkserver cannot pickle (works
only with fork: H4 pytorch#22585)."""

from typing import Any

from torch.utils.data import default_collate

from broken._wrap import Wrapped


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        user = kwargs.get("collate_fn") or default_collate

        def collate(batch: Any) -> Any:  # the bug: a local function
            return user(batch)

        return {**kwargs, "collate_fn": collate}
