"""Bug: the sampler's order is read once, when the loader is built, and replayed every epoch, so
`sampler.set_epoch(e)` never reaches it (RanksShareEpochPermutation: every epoch is epoch 0's
order)."""

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from broken._wrap import Wrapped


class _Frozen(Sampler[int]):
    def __init__(self, inner: Any) -> None:
        self.order = list(inner)  # the bug: the order of the epoch the sampler was built in

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if kwargs.get("sampler") is not None:
            kwargs["sampler"] = _Frozen(kwargs["sampler"])
        return kwargs
