"""Not a bug, a SHOULD: the shuffle is drawn from the user's generator, and from it alone, but by
another algorithm than torch's RandomSampler (its permutation reversed), so the order is
reproducible (OrderFromUserGenerator holds) yet not torch's for that seed (a drop-in's SHOULD:
NON-STRICT, never FAIL)."""

from collections.abc import Iterator
from typing import Any

import torch

from broken._wrap import Wrapped


class Reversed(torch.utils.data.Sampler[int]):
    """torch.randperm(n, generator=g) handed out from its end."""

    def __init__(self, n: int, generator: torch.Generator) -> None:
        self.n, self.generator = n, generator

    def __iter__(self) -> Iterator[int]:
        return iter(torch.randperm(self.n, generator=self.generator).flip(0).tolist())

    def __len__(self) -> int:
        return self.n


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        generator = kwargs.get("generator")
        if kwargs.get("shuffle") and generator is not None:
            kwargs = {**kwargs, "shuffle": False, "sampler": Reversed(len(dataset), generator)}
        super().__init__(dataset, **kwargs)
