"""`conformance.adapters.paddle:Loader`: paddle.io.DataLoader behind torch's DataLoader constructor.

The suite speaks torch's constructor and expects torch tensors; paddle's loader has its own
constructor and yields paddle tensors. This adapter bridges the two without changing what paddle's
loader *does* (its workers, queues, shutdown and error handling are what the suite measures):

* Validation, samplers and `len()` are torch's: a torch `DataLoader` is built first (it starts no
  process) and its `batch_sampler` / `sampler` / `collate_fn` drive paddle, so bad arguments raise
  torch's exceptions with torch's messages, and shuffling follows torch's `generator`.
* Batches are collated in paddle's workers by torch's collate function, turned into numpy arrays
  (which paddle moves through shared memory), and turned back into torch tensors in the main
  process through DLPack (zero-copy).
* Inside paddle's workers, `torch.utils.data.get_worker_info()` answers as in torch's workers (id,
  num_workers, seed = base seed + id, the worker's dataset copy), and `torch.initial_seed()` is that
  seed; the base seed is drawn from `generator` like torch's. torch has no public setter for its
  worker info, so the adapter sets `torch.utils.data._utils.worker._worker_info` inside paddle's
  worker process: a private torch name, touched only in a process paddle created for us.

Not bridged, declared as limits (`Loader.limits`, a SKIP in the suite): `multiprocessing_context`
other than fork (paddle starts workers with multiprocessing's default context) and
`pin_memory=True` (paddle pins only into its own CUDA place; this CPU build has none, and a torch
pin added by the adapter would measure the adapter, not paddle). `in_order=False` is accepted:
paddle delivers in order, one of the orders `in_order=False` allows. paddle restores a batch's
structure with lists, so a tuple inside a batch comes back as a list.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np
import torch

try:
    import paddle
    import paddle.io
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.paddle needs paddlepaddle: pip install 'loaderspec[paddle]'"
    ) from exc
from loaderspec.conformance.adapters._front import (
    Adapter,
    Limit,
    draw_base_seed,
    given,
    start_method,
)
from torch.utils.data import DataLoader as TorchDataLoader
from torch.utils.data import IterableDataset
from torch.utils.data._utils import worker as _torch_worker

from loaderspec.vocabulary import TORCH_PREFETCH_FACTOR

__all__ = ["Loader"]


def _to_numpy(obj: Any) -> Any:
    """torch tensors -> numpy arrays, through lists, tuples and dicts (worker side)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().numpy()
    if isinstance(obj, Mapping):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple) and not isinstance(obj, str | bytes):
        return [_to_numpy(v) for v in obj]
    return obj


def _to_torch(obj: Any) -> Any:
    """paddle tensors -> torch tensors (DLPack, zero-copy), through lists and dicts (main side)."""
    if isinstance(obj, paddle.Tensor):
        return torch.from_dlpack(obj)
    if isinstance(obj, Mapping):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list) and not isinstance(obj, str | bytes):
        return [_to_torch(v) for v in obj]
    return obj


# paddle's result queue carries a batch as its list of arrays plus a structure; a batch with no
# array at all (a python int from torch's default_convert, a list of bytes) is lost on the way.
# Every batch therefore travels as (payload, _MARK), and the main process drops the mark.
_MARK = np.zeros(1, dtype=np.int8)  # paddle refuses a 0-byte tensor


class _WorkerCollate:
    """Paddle's collate_fn: torch's collate, then numpy, sent as `(payload, _MARK)` (paddle
    flattens only sequences and mappings at the top level, and needs one array per batch).

    `single`: paddle hands us a one-index batch (`[item]`, map-style without auto-collation) or
    a bare item (iterable without auto-collation); torch's collate_fn then converts one item.
    """

    def __init__(self, collate: Callable[[Any], Any], mode: str) -> None:
        self.collate = collate
        self.mode = mode  # "batch" | "one_of_list" | "one"

    def __call__(self, data: Any) -> tuple[Any, np.ndarray]:
        if self.mode == "one_of_list":
            data = data[0]
        return (_to_numpy(self.collate(data)), _MARK)


class _TorchBatches:
    """torch's batch sampler (or single-index sampler) as the index batches paddle consumes."""

    def __init__(self, torch_loader: TorchDataLoader) -> None:
        self.torch_loader = torch_loader

    def __iter__(self) -> Iterator[list[int]]:
        dl = self.torch_loader
        if dl.batch_sampler is not None:
            yield from (list(b) for b in dl.batch_sampler)
        else:
            yield from ([i] for i in dl.sampler)

    def __len__(self) -> int:
        dl = self.torch_loader
        # torch types both as Iterable; they are Samplers, which have a length here.
        return len(dl.batch_sampler if dl.batch_sampler is not None else dl.sampler)  # type: ignore[arg-type]


class _PaddleIterable(paddle.io.IterableDataset):
    """A torch IterableDataset seen by paddle as its own (paddle checks its own base class)."""

    def __init__(self, inner: IterableDataset) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)


class _WorkerInit:
    """Paddle's worker_init_fn: set torch's worker info and seeds, then the user's function.

    `base_seed` is set in the main process before each iterator starts its workers (fork copies
    it); it is drawn from the loader's `generator`, as torch's iterator does.
    """

    def __init__(self, user_fn: Callable[[int], None] | None) -> None:
        self.user_fn = user_fn
        self.base_seed = 0

    def __call__(self, worker_id: int) -> None:
        info = paddle.io.get_worker_info()
        dataset: Any = info.dataset  # paddle's, or a torch dataset behind one (typed as paddle's)
        if isinstance(dataset, _PaddleIterable):
            dataset = dataset.inner
        seed = self.base_seed + worker_id
        torch.manual_seed(seed)
        random.seed(seed)
        # No public setter exists; this is the global torch's get_worker_info() reads.
        _torch_worker._worker_info = _torch_worker.WorkerInfo(
            id=worker_id, num_workers=info.num_workers, seed=seed, dataset=dataset
        )
        if self.user_fn is not None:
            self.user_fn(worker_id)


class _Iter:
    """The iterator: paddle's, with batches converted to torch."""

    def __init__(self, inner: Any, length: Callable[[], int]) -> None:
        self._inner = inner
        self._length = length

    def __iter__(self) -> _Iter:
        return self

    def __next__(self) -> Any:
        batch = next(self._inner)
        return _to_torch(batch[0])

    def __len__(self) -> int:
        return self._length()


class Loader(Adapter):
    """paddle.io.DataLoader with torch.utils.data.DataLoader's constructor (torch 2.13)."""

    # Dropping the iterator stops its workers (paddle keeps the iterator in the loader only with
    # persistent_workers=True, as torch does); see conformance.adapters.torchdata for "loader".
    workers_die_with = "iterator"
    limits = (
        Limit(
            "multiprocessing_context other than fork",
            "paddle.io.DataLoader starts its workers with multiprocessing's default (fork) context",
            lambda o: start_method(o["multiprocessing_context"]) not in (None, "fork"),
        ),
        Limit(
            "pin_memory=True",
            "paddle.io.DataLoader pins only into paddle's CUDA place, which its CPU build lacks",
            given("pin_memory"),
        ),
    )

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self._init = _WorkerInit(self._torch.worker_init_fn)
        dl = self._torch
        if isinstance(dataset, IterableDataset):
            batched = dl.batch_size is not None
            self._paddle = paddle.io.DataLoader(
                _PaddleIterable(dataset),
                batch_size=dl.batch_size,
                drop_last=dl.drop_last,
                **self._common(dl, "batch" if batched else "one"),
            )
        else:
            mode = "batch" if dl.batch_sampler is not None else "one_of_list"
            self._paddle = paddle.io.DataLoader(
                # duck-typed: paddle reads a batch sampler by iterating it and len()
                dataset,
                batch_sampler=cast(Any, _TorchBatches(dl)),
                **self._common(dl, mode),
            )

    def _common(self, dl: TorchDataLoader, mode: str) -> dict[str, Any]:
        return {
            "collate_fn": _WorkerCollate(dl.collate_fn, mode),
            "num_workers": dl.num_workers,
            "prefetch_factor": dl.prefetch_factor or TORCH_PREFETCH_FACTOR,
            "timeout": dl.timeout,
            "worker_init_fn": self._init,
            "persistent_workers": dl.persistent_workers,
            "use_shared_memory": True,
            "return_list": True,
        }

    def __iter__(self) -> _Iter:
        self._init.base_seed = draw_base_seed(self._torch)
        return _Iter(iter(self._paddle), self.__len__)
