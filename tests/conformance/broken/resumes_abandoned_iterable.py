"""Bug: persistent workers keep an IterableDataset's iterator across epochs and start it afresh
only once it has ended, so an epoch left early (del, break) leaves its position to the next
epoch, which then misses the items already read (ExactlyOnce). Every epoch run to its end is
right, which is why only a case that abandons an iterable persistent epoch sees it."""

from typing import Any

from torch.utils.data import IterableDataset

from broken._wrap import Wrapped


class _Ended:
    pass


class _KeepsItsPlace(IterableDataset):
    """The user's IterableDataset, its iterator kept per worker process (the bug)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.it: Any = None

    def __iter__(self) -> Any:
        if self.it is None:
            self.it = iter(self.inner)
        return self

    def __next__(self) -> Any:
        item = next(self.it, _Ended)
        if item is _Ended:
            self.it = None  # a finished epoch does start afresh
            raise StopIteration
        return item


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        if isinstance(dataset, IterableDataset) and kwargs.get("persistent_workers"):
            dataset = _KeepsItsPlace(dataset)
        super().__init__(dataset, **kwargs)
