"""Bug: with shuffle=True and no generator, every epoch is shuffled from the same seed, so every
epoch has the same order (ExactlyOnce: a shuffle is a new permutation each epoch)."""

from typing import Any

import torch
from loaderspec.reference import DataLoader as Reference

from broken._wrap import Relay, Wrapped


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.dataset, self.kwargs = dataset, kwargs

    def __iter__(self) -> Relay:
        if self.kwargs.get("shuffle") and self.kwargs.get("generator") is None:
            fixed = torch.Generator().manual_seed(0)  # the bug: the same seed every epoch
            self.inner = Reference(self.dataset, **{**self.kwargs, "generator": fixed})
        return super().__iter__()
