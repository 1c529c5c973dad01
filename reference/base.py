"""What every reference iterator shares with torch's ``_BaseDataLoaderIter``, and the 0-worker path.

Owns: the sampler iterator, the worker ``base_seed`` (drawn exactly where torch draws it, so a
seeded generator gives the same batches and worker seeds), the pin-memory device decision (torch's
warnings, torch's ``torch.accelerator`` checks), the IterableDataset length warning. Knows nothing
of processes: ``reference/shell.py`` adds the workers.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

import torch
from loaderspec.reference.checkpoint import (
    EpochProgress,
    SamplerCursor,
    capture,
    draw_base_seed,
    encode_rng,
    rng_state,
    set_rng,
    start_fetcher,
    worker_starts,
)
from torch.utils.data import _DatasetKind
from torch.utils.data._utils import pin_memory as torch_pin_memory

from loaderspec.vocabulary import FORCE_PIN_THREAD_ENV


class LoaderOptions(Protocol):
    """What an iterator reads off its loader (``reference.loader.DataLoader``'s attributes,
    torch's names): the iterators take this, so only ``loader.py`` imports them and nothing
    here imports the loader (no module cycle)."""

    @property
    def dataset(self) -> Any: ...
    @property
    def _dataset_kind(self) -> int: ...
    @property
    def _IterableDataset_len_called(self) -> int | None: ...
    @property
    def _auto_collation(self) -> bool: ...
    @property
    def drop_last(self) -> bool: ...
    @property
    def _index_sampler(self) -> Any: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def pin_memory(self) -> bool: ...
    @property
    def pin_memory_device(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    @property
    def collate_fn(self) -> Any: ...
    @property
    def generator(self) -> Any: ...
    @property
    def persistent_workers(self) -> bool: ...
    @property
    def prefetch_factor(self) -> int | None: ...
    @property
    def in_order(self) -> bool: ...
    @property
    def multiprocessing_context(self) -> Any: ...
    @property
    def worker_init_fn(self) -> Any: ...
    # Checkpoint and resume (reference/checkpoint.py): what the next epoch starts from.
    @property
    def _carries_state(self) -> bool: ...
    @property
    def _items_per_batch(self) -> int: ...
    def _begin_epoch(self) -> EpochProgress: ...


class BaseIter:
    """torch's ``_BaseDataLoaderIter``: the fields both iterators need, in torch's order."""

    def __init__(self, loader: LoaderOptions) -> None:
        self._dataset = loader.dataset
        self._dataset_kind = loader._dataset_kind
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        if loader.pin_memory and loader.pin_memory_device:
            warnings.warn(
                "pin_memory_device is deprecated, the current accelerator will be used as the"
                f" device,ignore pin_memory_device='{loader.pin_memory_device}'.",
                stacklevel=3,
            )
        if loader.pin_memory and not torch.accelerator.is_available():
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used.",
                stacklevel=3,
            )
        has_accelerator = torch.accelerator.is_available()
        # LOADERSPEC_FORCE_PIN_THREAD=1 (docs/contracts.md): run the pin thread on a CPU-only
        # machine, pinning being the identity, so CI traces exercise the pin thread's actions.
        forced = os.environ.get(FORCE_PIN_THREAD_ENV) == "1"
        self._pin_memory = loader.pin_memory and (has_accelerator or forced)
        acc = torch.accelerator.current_accelerator() if has_accelerator else None
        self._pin_memory_device: str | None = acc.type if acc is not None else None
        if self._pin_memory_device == "mps":
            self._pin_memory = False
            warnings.warn(
                "'pin_memory' argument is set as true but not supported on MPS now, "
                "device pinned memory won't be used.",
                stacklevel=3,
            )
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        # torch creates the sampler iterator *before* drawing base_seed; RandomSampler draws its
        # own seed lazily on the first next(), so this order keeps the generator's stream equal.
        self._progress = loader._begin_epoch()  # what state_dict() describes (checkpoint.py)
        self._sampler_iter = self._epoch_sampler_iter(loader)
        self._base_seed = draw_base_seed(loader.generator)
        self._resume_seeds(loader)
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def __iter__(self) -> BaseIter:
        return self

    def _resume_seeds(self, loader: LoaderOptions) -> None:
        """The workers' base seed: a resumed epoch's is the state's (the draw above keeps the
        generator's stream as the uninterrupted run drew it). An IterableDataset's generator
        draws nothing more this epoch: a resumed one is put where the uninterrupted run's was,
        so that the next epochs draw their seeds as it did."""
        progress = self._progress
        start = progress.resumed_start
        if start is not None and start["base_seed"] is not None:
            self._base_seed = start["base_seed"]
        progress.base_seed = self._base_seed
        if self._dataset_kind != _DatasetKind.Iterable:
            return
        if start is not None and start["sampler_rng"] is not None:
            set_rng(loader.generator, start["sampler_rng"])
            progress.iter_rng = start["sampler_rng"]
        else:
            progress.iter_rng = encode_rng(rng_state(loader.generator))

    def _epoch_sampler_iter(self, loader: LoaderOptions) -> Iterator[Any]:
        """This epoch's sampler iterator: map-style, counted by position (a resumed epoch skips
        the positions handed out); an IterableDataset's sampler gives nothing to resume. A
        Stateful sampler's state is loaded before ``iter(sampler)`` and recorded as the order
        begins (the order a resumed epoch draws again)."""
        progress = self._progress
        sampler = progress.sampler
        if sampler is not None:
            start = progress.resumed_start
            if start is not None and start["sampler_state"] is not None:
                sampler.load_state_dict(copy.deepcopy(start["sampler_state"]))
            progress.sampler_state = copy.deepcopy(sampler.state_dict())
        sampler_iter = iter(self._index_sampler)
        if self._dataset_kind == _DatasetKind.Iterable:
            return sampler_iter
        cursor = SamplerCursor(sampler_iter, loader.generator, self._progress.start)
        self._progress.cursor = cursor
        return cursor

    def _reset(self, loader: LoaderOptions, first_iter: bool = False) -> None:
        if not first_iter:  # persistent workers' next epoch: the same workers, the same seed
            self._progress = loader._begin_epoch()
            self._progress.base_seed = self._base_seed
            if self._dataset_kind == _DatasetKind.Iterable:
                self._progress.iter_rng = encode_rng(rng_state(loader.generator))
        self._sampler_iter = self._epoch_sampler_iter(loader)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def _next_index(self) -> Any:
        return next(self._sampler_iter)  # may raise StopIteration

    def _next_data(self) -> Any:
        raise NotImplementedError

    def __next__(self) -> Any:
        try:
            data = self._next_data()
        except StopIteration:
            self._progress.end()
            raise
        self._num_yielded += 1
        if (
            self._dataset_kind == _DatasetKind.Iterable
            and self._IterableDataset_len_called is not None
            and self._num_yielded > self._IterableDataset_len_called
        ):
            warn_msg = (
                f"Length of IterableDataset {self._dataset} was reported to be"
                f" {self._IterableDataset_len_called}(when accessing len(dataloader)), but"
                f" {self._num_yielded} samples have been fetched. "
            )
            if self._num_workers > 0:
                warn_msg += (
                    "For multiprocessing data-loading, this could be caused by not properly"
                    " configuring the IterableDataset replica at each worker. Please see"
                    " https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset"
                    " for examples."
                )
            warnings.warn(warn_msg, stacklevel=2)
        return data

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self) -> Any:
        raise NotImplementedError("{} cannot be pickled", self.__class__.__name__)


class SingleProcessIter(BaseIter):
    """num_workers=0: fetch in the loader's process (torch's ``_SingleProcessDataLoaderIter``)."""

    def __init__(self, loader: LoaderOptions) -> None:
        super().__init__(loader)
        starts = worker_starts(
            self._progress.resumed_start,
            items_per_batch=loader._items_per_batch,
            num_workers=0,
        )

        def make_fetcher() -> Any:
            return _DatasetKind.create_fetcher(
                self._dataset_kind,
                self._dataset,
                self._auto_collation,
                self._collate_fn,
                self._drop_last,
            )

        iterable = self._dataset_kind == _DatasetKind.Iterable
        self._dataset_fetcher = start_fetcher(
            make_fetcher, self._dataset, None if starts is None else starts[0], iterable=iterable
        )
        # The user's states are asked when a state is (as StatefulDataLoader does): nothing
        # is prefetched here, so they are the ones after the last batch handed out.
        dataset = self._dataset

        def live(ended: bool) -> Any:
            return capture(dataset, self._dataset_fetcher, iterable=iterable, ended=ended)

        self._progress.live = live

    def _next_data(self) -> Any:
        index = self._next_index()  # may raise StopIteration
        try:
            data = self._dataset_fetcher.fetch(index)  # may raise StopIteration
        except StopIteration:
            raise
        except BaseException:
            self._progress.count()  # handed out as the error it raised
            raise
        self._progress.count()
        if self._pin_memory and self._pin_memory_device is not None:
            data = torch_pin_memory.pin_memory(data, self._pin_memory_device)
        return data
