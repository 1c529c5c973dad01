"""The front every adapter shares: torch's DataLoader constructor, and the limits it declares.

An adapter puts another loader behind `torch.utils.data.DataLoader`'s constructor (torch 2.13).
This module owns what is the same for all of them, so each adapter module holds only the
translation to its loader:

* `Adapter.__init__` builds a torch `DataLoader` first. It starts no process; it validates every
  argument (bad input raises torch's exception with torch's message) and builds the samplers,
  `collate_fn` and `len()` that the adapted loader is driven with.
* Limits are declared, not discovered: an adapter lists `Limit`s (a configuration its loader
  cannot express, and why). `loaderspec_unsupported(**kwargs)` answers from that list before
  anything is built (the suite turns the answer into a SKIP), and the constructor raises
  `NotImplementedError` with the same one line.
* `BatchFetcher` is torch's own map-style fetcher (`_MapDatasetFetcher`: `__getitems__` where the
  dataset has one, then `collate_fn`), the function the adapted loaders' workers run.

This module must not know any adapted loader.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import IterableDataset
from torch.utils.data._utils.fetch import _MapDatasetFetcher

__all__ = [
    "Adapter",
    "BatchFetcher",
    "Limit",
    "given",
    "index_batches",
    "is_iterable",
    "start_method",
]

_SIGNATURE = inspect.signature(TorchDataLoader.__init__)


@dataclass(frozen=True)
class Limit:
    """A torch configuration the adapted loader cannot express.

    `config` names the configuration as a user writes it ("timeout > 0"), `reason` says in one
    line why the loader cannot do it, and `applies` tells, from torch's bound arguments (defaults
    filled in, `dataset` among them, None when unknown), whether a configuration is this one.
    """

    config: str
    reason: str
    applies: Callable[[Mapping[str, Any]], bool]

    def message(self) -> str:
        return f"{self.config}: {self.reason}"


def bind(dataset: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """torch's constructor arguments by name, defaults filled in (TypeError for unknown ones,
    worded as Python words it for torch's DataLoader)."""
    bound = _SIGNATURE.bind(None, dataset, *args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def is_iterable(options: Mapping[str, Any]) -> bool:
    return isinstance(options.get("dataset"), IterableDataset)


def given(argument: str) -> Callable[[Mapping[str, Any]], bool]:
    """A `Limit.applies` for "this argument was given": set, true, non-zero or non-empty
    (`worker_init_fn`, `persistent_workers`, `timeout`, `pin_memory`, `pin_memory_device`...)."""
    return lambda options: bool(options[argument])


def start_method(context: Any) -> str | None:
    """The start method a `multiprocessing_context` argument names (a string or a context)."""
    if context is None or isinstance(context, str):
        return context
    return context.get_start_method()


def index_batches(loader: TorchDataLoader) -> Iterator[Any]:
    """What torch's iterator hands its workers: index lists from the batch sampler, or single
    indices from the sampler when automatic batching is off."""
    if loader.batch_sampler is not None:
        return (list(batch) for batch in loader.batch_sampler)
    return iter(loader.sampler)


class BatchFetcher:
    """A worker's job in torch's map-style protocol: index (or index list) -> collated batch.

    torch's own fetcher does it, so `__getitems__`, auto-collation and `collate_fn` behave as in
    torch's workers. Picklable when the dataset and `collate_fn` are (spawned workers get it).
    """

    def __init__(self, loader: TorchDataLoader) -> None:
        self.fetcher = _MapDatasetFetcher(
            loader.dataset, loader._auto_collation, loader.collate_fn, loader.drop_last
        )

    def __call__(self, possibly_batched_index: Any) -> Any:
        return self.fetcher.fetch(possibly_batched_index)


def draw_base_seed(loader: TorchDataLoader) -> int:
    """One int64 from the loader's generator, as each torch iterator draws (before its sampler
    draws), so that a shuffle with a seeded generator equals torch's."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator))


class Adapter:
    """Base of the adapters: torch's constructor, validation, samplers, `len()`, limits.

    Subclasses declare `limits` and `workers_die_with`, call `super().__init__` first, then build
    their loader from `self._torch` (torch's view of the options) and `self._options`.
    """

    # What must be dropped for the loader's workers to stop: "iterator" (torch's DataLoader, the
    # reference) or "loader" (a loader that keeps its current iterator, as torchdata's do).
    workers_die_with: ClassVar[Literal["iterator", "loader"]] = "iterator"
    limits: ClassVar[tuple[Limit, ...]] = ()

    @classmethod
    def loaderspec_unsupported(cls, dataset: Any = None, **loader_kwargs: Any) -> str | None:
        """None when this configuration can be expressed, else why not (one line)."""
        options = bind(dataset, (), loader_kwargs)
        return next((lim.message() for lim in cls.limits if lim.applies(options)), None)

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        """Validate as torch does, then refuse a configuration the loader cannot express.

        Raises:
            TypeError, ValueError: torch's, for arguments torch rejects.
            NotImplementedError: one of `limits` applies (one line: the configuration, why).
        """
        # torch validates everything and builds the samplers; it starts no process.
        self._torch = TorchDataLoader(dataset, *args, **kwargs)
        self._options = bind(dataset, args, kwargs)
        for limit in self.limits:
            if limit.applies(self._options):
                raise NotImplementedError(limit.message())

    def __len__(self) -> int:
        return len(self._torch)

    def __getattr__(self, name: str) -> Any:
        # dataset, batch_size, sampler, generator, num_workers, ...: torch's view of the options.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._torch, name)

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__qualname__}({self._torch.dataset!r})"
