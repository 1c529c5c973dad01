"""Bug: drop_last is ignored for an IterableDataset: each worker's last, partial batch is handed
out (ExactlyOnce: not the batches torch gives)."""

from typing import Any

from torch.utils.data import IterableDataset

from broken._wrap import Wrapped


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        if isinstance(dataset, IterableDataset):
            kwargs["drop_last"] = False  # the bug
        super().__init__(dataset, **kwargs)
