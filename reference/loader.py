"""``reference.DataLoader``: torch 2.13's public constructor, validation and ``len()``.

Owns the user-facing object: arguments, their checks (torch's messages, word for word), the
default samplers and collate functions (torch's own), and choosing an iterator. Not a subclass of
``torch.utils.data.DataLoader`` (so none of torch's iterator machinery can leak in), but the same
fields and the same behaviour, so a harness can swap it in. Knows no protocol: the iterators do.
"""

from __future__ import annotations

import copy
import multiprocessing as python_multiprocessing
from collections.abc import Callable, Iterable
from math import ceil
from typing import Any, Generic, TypeVar

import torch
from loaderspec.reference import loop
from loaderspec.reference.base import BaseIter, SingleProcessIter
from loaderspec.reference.checkpoint import (
    ITERABLE,
    MAP,
    EpochProgress,
    check_state,
    fresh_state,
    is_stateful,
    trace_checkpoint,
)
from loaderspec.reference.shell import MultiProcessingIter
from torch.utils.data import (
    BatchSampler,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    _DatasetKind,
)
from torch.utils.data import DataLoader as _TorchDataLoader
from torch.utils.data._utils import collate as torch_collate
from torch.utils.data.dataloader import _InfiniteConstantSampler

from loaderspec import tracewriter
from loaderspec.vocabulary import TORCH_PREFETCH_FACTOR, UserAction

T_co = TypeVar("T_co", covariant=True)

__all__ = ["DataLoader"]


class DataLoader(Generic[T_co]):
    """A drop-in for ``torch.utils.data.DataLoader`` whose multi-process protocol is the spec's.

    Arguments, defaults and errors are torch 2.13's; see its documentation.
    """

    dataset: Dataset[T_co]
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    drop_last: bool
    timeout: float
    sampler: Sampler | Iterable
    pin_memory_device: str
    prefetch_factor: int | None
    _iterator: BaseIter | None
    __initialized = False

    def __init__(
        self,
        dataset: Dataset[T_co],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler[list] | Iterable[list] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        snapshot_every_n_steps: int | None = 1,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor"
                " to None."
            )
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = TORCH_PREFETCH_FACTOR
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if snapshot_every_n_steps is not None and (
            not isinstance(snapshot_every_n_steps, int) or snapshot_every_n_steps < 1
        ):
            raise ValueError(
                "snapshot_every_n_steps should be a positive int (or None), got"
                f" {snapshot_every_n_steps!r}; the reference's state is exact at every step,"
                " whatever its value"
            )
        # torchdata StatefulDataLoader's argument, accepted for compatibility: state_dict() is
        # computed when asked, exact at every step (docs/checkpoint.md).
        self.snapshot_every_n_steps = snapshot_every_n_steps

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order

        if isinstance(dataset, IterableDataset):
            self._dataset_kind = _DatasetKind.Iterable
            if shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}"
                )
            elif batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = _DatasetKind.Map

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive "
                    "with batch_size, shuffle, sampler, and "
                    "drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching "
                "and is mutually exclusive with drop_last"
            )

        if sampler is None:
            if self._dataset_kind == _DatasetKind.Iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                # torch's samplers are typed for Sized datasets; a map-style dataset is one.
                sampler = RandomSampler(dataset, generator=generator)  # type: ignore[arg-type]
            else:
                sampler = SequentialSampler(dataset)  # type: ignore[arg-type]  # (as above)

        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator

        if collate_fn is None:
            if self._auto_collation:
                collate_fn = torch_collate.default_collate
            else:
                collate_fn = torch_collate.default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self.__initialized = True
        self._IterableDataset_len_called: int | None = None
        self._iterator = None
        # Checkpoint and resume (reference/checkpoint.py, docs/checkpoint.md).
        self._pending_state: dict[str, Any] | None = None  # loaded, for the next iter()
        self._progress: EpochProgress | None = None  # the last iterator's epoch
        self._next_epoch = 0  # the epoch the next iter() starts, absent a loaded state
        # torch's method, borrowed: its self type names torch's DataLoader, not this one.
        self.check_worker_number_rationality()  # type: ignore[misc]

    # torch's property and check, unchanged (they read only public fields).
    check_worker_number_rationality = _TorchDataLoader.check_worker_number_rationality

    @property
    def multiprocessing_context(self) -> Any:
        return self.__multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, multiprocessing_context: Any) -> None:
        if multiprocessing_context is not None:
            if self.num_workers > 0:
                if isinstance(multiprocessing_context, str):
                    valid_start_methods = torch.multiprocessing.get_all_start_methods()
                    if multiprocessing_context not in valid_start_methods:
                        raise ValueError(
                            "multiprocessing_context option "
                            f"should specify a valid start method in {valid_start_methods!r}, but"
                            f" got multiprocessing_context={multiprocessing_context!r}"
                        )
                    multiprocessing_context = torch.multiprocessing.get_context(
                        multiprocessing_context
                    )
                if not isinstance(
                    multiprocessing_context, python_multiprocessing.context.BaseContext
                ):
                    raise TypeError(
                        "multiprocessing_context option should be a valid context "
                        "object or a string specifying the start method, but got "
                        f"multiprocessing_context={multiprocessing_context}"
                    )
            else:
                raise ValueError(
                    "multiprocessing_context can only be used with "
                    "multi-process loading (num_workers > 0), but got "
                    f"num_workers={self.num_workers}"
                )
        self.__multiprocessing_context = multiprocessing_context

    def __setattr__(self, attr: str, val: Any) -> None:
        if self.__initialized and attr in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{attr} attribute should not be set after {self.__class__.__name__} is initialized"
            )
        super().__setattr__(attr, val)

    def _get_iterator(self) -> BaseIter:
        if self.num_workers == 0:
            return SingleProcessIter(self)
        self.check_worker_number_rationality()  # type: ignore[misc]  # (borrowed, as above)
        return MultiProcessingIter(self)

    def __iter__(self) -> BaseIter:
        if self.persistent_workers and self.num_workers > 0:
            it = self._iterator
            # A failed iterator (worker death, timeout) or one shut down is not resumed: fresh
            # workers instead (docs/architecture.md, fail-stop). Nor after load_state_dict():
            # the loaded state starts fresh workers, so that it is never ignored.
            # An iterator that began from a loaded state is not reused either: its workers' shards
            # were arranged for that state (and a trace's NumTasks is per iterator).
            if (
                isinstance(it, MultiProcessingIter)
                and it.resumable
                and self._pending_state is None
                and not it.began_resumed
            ):
                it._reset(self)
                return it
            if isinstance(it, MultiProcessingIter):
                progress = self._progress
                fresh = self._pending_state is None
                if progress is not None and progress.ended and it.began_resumed and fresh:
                    # The next epoch as these workers would have begun it.
                    self._pending_state = progress.state()
                it.shut_down()
            self._iterator = self._get_iterator()
            return self._iterator
        return self._get_iterator()

    # ------------------------------------------------------ checkpoint and resume ----------
    @property
    def _checkpoint_kind(self) -> str:
        return ITERABLE if self._dataset_kind == _DatasetKind.Iterable else MAP

    @property
    def _carries_state(self) -> bool:
        """Whether a worker's results carry the user's state (reference/checkpoint.py): an
        IterableDataset's always (whether ``iter(dataset)`` is Stateful is known only there),
        a map-style dataset's when it has torchdata's Stateful protocol."""
        return self._dataset_kind == _DatasetKind.Iterable or is_stateful(self.dataset)

    @property
    def _stateful_sampler(self) -> Any:
        """The sampler whose own state a checkpoint keeps (Stateful), or None."""
        for sampler in (self.batch_sampler, self.sampler):
            if sampler is not None and is_stateful(sampler):
                return sampler
        return None

    @property
    def _shape(self) -> dict[str, Any]:
        """What a state must have been taken with to resume here (``checkpoint.check_state``)."""
        iterable = self._dataset_kind == _DatasetKind.Iterable
        try:
            length: int | None = len(self.dataset)  # type: ignore[arg-type]  # (may lack it)
        except TypeError:
            length = None
        return {
            "dataset_kind": self._checkpoint_kind,
            "num_workers": self.num_workers,
            "dataset_len": length,
            "batch_size": self.batch_size,
            "sampler": type(
                self.sampler if self.batch_size is not None else self._index_sampler
            ).__name__,
            "total": None if iterable else len(self._index_sampler),
            "stateful_sampler": self._stateful_sampler is not None,
        }

    @property
    def _items_per_batch(self) -> int:
        return self.batch_size if self.batch_size is not None else 1

    def _begin_epoch(self) -> EpochProgress:
        """An iterator begins an epoch: the loaded state's, or the next one."""
        start, self._pending_state = self._pending_state, None
        epoch = self._next_epoch if start is None else start["epoch"]
        self._next_epoch = epoch + 1
        self._progress = EpochProgress(
            shape=self._shape,
            epoch=epoch,
            start=start,
            generator=self.generator,
            persistent=self.persistent_workers,
            sampler=self._stateful_sampler,
        )
        return self._progress

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: what the last iterator handed out (the batches the user
        got, never those prefetched), or the loaded state the next ``iter()`` will start from.
        Allowed at any moment; the dict returned is the caller's and never changes."""
        if self._pending_state is not None:
            state = copy.deepcopy(self._pending_state)
        elif self._progress is None:
            state = fresh_state(self._shape, self._next_epoch)
        else:
            state = self._progress.state()
        if tracewriter.ENABLED and self.num_workers > 0:
            self._trace_state_dict(state)
        return state

    def _trace_state_dict(self, state: dict[str, Any]) -> None:
        """UserStateDict's record: taken by the live iterator's core, with its post-state, when
        the state is that iterator's; else (a load pending, no iter() yet) it opens the next
        iterator's run, whose start it must be (docs/checkpoint.md, "Traced")."""
        progress = self._progress
        checkpoint = trace_checkpoint(state)
        if self._pending_state is None and progress is not None and progress.core is not None:
            loop.take(progress.core, UserAction.USER_STATE_DICT, checkpoint)
        else:
            tracewriter.emit_user(UserAction.USER_STATE_DICT, checkpoint)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue from ``state_dict`` (what ``state_dict()``
        returned, here or in an earlier process), whatever was called before.

        Raises:
            TypeError, ValueError: not such a state, one taken by another loader (dataset kind
                or length, ``batch_size``, sampler; an IterableDataset's or a Stateful
                dataset's with another ``num_workers``) or a malformed field: one message
                naming the field, both values and the fix. Nothing changes.
        """
        self._pending_state = check_state(state_dict, self._shape)
        if tracewriter.ENABLED and self.num_workers > 0:
            # No iterator takes this step: the state governs the next one, whose run the record
            # opens; trace-check holds that run's start to it (LoadIsNeverIgnored).
            tracewriter.emit_user(
                UserAction.USER_LOAD_STATE_DICT, trace_checkpoint(self._pending_state)
            )

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self) -> Any:
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self._dataset_kind == _DatasetKind.Iterable:
            # An IterableDataset may define __len__ (torch's own check); its type does not say so.
            length = self._IterableDataset_len_called = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is not None:
                length = (
                    length // self.batch_size if self.drop_last else ceil(length / self.batch_size)
                )
            return length
        return len(self._index_sampler)
