"""What the independently written loaders share: torch's constructor and samplers, the fetch, an
error that crosses from a worker, and the main side of the protocol (dispatch within the prefetch
window, round robin over the active workers, reorder, epochs, fail-stop). Each loader adds a
`Transport`: how tasks reach its workers and results come back.

Written from torch's documented behaviour, not its loader code: only torch's `DataLoader`
constructor (argument validation, samplers, `len`), its `WorkerInfo` and `torch.accelerator` are
used.
"""

from __future__ import annotations

import importlib
import os
import pickle
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import IterableDataset
from torch.utils.data._utils.worker import WorkerInfo

__all__ = [
    "EXHAUSTED",
    "Exhausted",
    "Failure",
    "Iter",
    "Job",
    "Loader",
    "Transport",
    "Worker",
    "worker_info",
]

# How long a waiting next() blocks on the results before it looks at the workers' health again.
WAIT_SLICE_S = 0.05


class Exhausted:
    """A worker's reply once its iterable shard has no more batches this epoch."""


EXHAUSTED = Exhausted()


@dataclass(frozen=True)
class Job:
    """What a worker needs (picklable: it travels to process workers)."""

    dataset: Any
    iterable: bool
    auto: bool  # automatic batching (batch_size is not None)
    batch_size: int | None
    drop_last: bool
    collate: Callable[[Any], Any]
    init_fn: Callable[[int], Any] | None
    num_workers: int


class Failure:
    """An exception raised in a worker, as text that pickles whatever the exception was."""

    def __init__(self, exc: BaseException, where: str) -> None:
        self.module = type(exc).__module__
        self.name = type(exc).__qualname__
        trace = "".join(traceback.format_exception(exc))
        self.message = f"Caught {type(exc).__name__} {where}.\nOriginal {trace}"

    def exception(self) -> BaseException:
        """The exception to raise in the main process: its own type when that type can be
        rebuilt from the message, else a RuntimeError carrying it."""
        try:
            cls: Any = importlib.import_module(self.module)
            for part in self.name.split("."):
                cls = getattr(cls, part)
            return cls(self.message)
        except Exception:
            return RuntimeError(self.message)


def worker_info(job: Job, worker_id: int, seed: int, method: str) -> WorkerInfo:
    """What `get_worker_info()` answers in worker `worker_id` (torch's fields)."""
    return WorkerInfo(
        id=worker_id,
        num_workers=job.num_workers,
        seed=seed,
        dataset=job.dataset,
        worker_method=method,
    )


# A pickled result up to this size goes through the transport's pipe in one atomic write; a
# bigger one by file (`Worker.packed`).
INLINE_MAX = 2048


def unpacked(got: bytes | str) -> tuple[int, int, int, Any]:
    """A result as `Worker.packed` gave it: from its bytes, or from the file it names (then
    removed)."""
    if isinstance(got, str):
        with open(got, "rb") as f:
            data = f.read()
        os.unlink(got)
        got = data
    return pickle.loads(got)


class Worker:
    """One worker's state (its iterable shard, a failed init) and its answer to one task; the
    transport runs it in a thread or a process, after setting the worker's info and seed."""

    def __init__(self, job: Job, worker_id: int, where: str) -> None:
        self.job = job
        self.id = worker_id
        self.where = where
        self.epoch = -1
        self.shard: Any = None
        self.exhausted = False
        self.init_failure: Failure | None = None
        try:
            if job.init_fn is not None:
                job.init_fn(worker_id)
        except Exception as exc:
            self.init_failure = Failure(exc, where)

    def handle(self, epoch: int, indices: Any) -> Any:
        """The batch for `indices` (a Failure if the user's code raised; EXHAUSTED once the
        shard of an iterable dataset ran out in this epoch)."""
        if self.init_failure is not None:
            return self.init_failure
        try:
            if not self.job.iterable:
                return self._map(indices)
            if epoch != self.epoch:  # a new epoch reads the shard from its start
                self.epoch, self.shard, self.exhausted = epoch, iter(self.job.dataset), False
            return self._iterable()
        except Exception as exc:
            return Failure(exc, self.where)

    def packed(self, epoch: int, task: int, indices: Any, directory: str) -> bytes | str:
        """The answer to one task, pickled here with the plain pickler (tensors by value): the
        bytes, or, over `INLINE_MAX`, the name of a file in `directory` holding them: a worker
        killed while writing a big result into a pool's pipe would leave a torn message there,
        on which the pool's result thread blocks for good (`unpacked` reads it back)."""
        result = self.handle(epoch, indices)
        try:
            data = pickle.dumps((epoch, task, self.id, result))
        except Exception as exc:
            data = pickle.dumps((epoch, task, self.id, Failure(exc, self.where)))
        if len(data) <= INLINE_MAX:
            return data
        # Written under a temporary name and renamed, so a file named in a result is whole.
        path = os.path.join(directory, f"{self.id}-{epoch}-{task}")
        with open(path + ".part", "wb") as f:
            f.write(data)
        os.rename(path + ".part", path)
        return path

    def _map(self, indices: Any) -> Any:
        ds = self.job.dataset
        if self.job.auto:
            return self.job.collate([ds[i] for i in indices])
        return self.job.collate(ds[indices])

    def _iterable(self) -> Any:
        if self.exhausted:
            return EXHAUSTED
        if not self.job.auto:
            try:
                return self.job.collate(next(self.shard))
            except StopIteration:
                self.exhausted = True
                return EXHAUSTED
        items = []
        for item in self.shard:
            items.append(item)
            if len(items) == self.job.batch_size:
                break
        if len(items) < (self.job.batch_size or 1):
            self.exhausted = True
            if not items or self.job.drop_last:
                return EXHAUSTED
        return self.job.collate(items)


class Transport(Protocol):
    """How the main process reaches its workers."""

    def send(self, worker: int, epoch: int, task: int, indices: Any) -> None:
        """Hand task `task` of `epoch` to `worker`."""

    def recv(self, timeout_s: float) -> tuple[int, int, int, Any] | None:
        """One result `(epoch, task, worker, batch or Failure or EXHAUSTED)`, or None when none
        came within `timeout_s`."""

    def dead(self) -> str | None:
        """The error text for a worker that died (None: all alive)."""

    def close(self) -> None:
        """Stop every worker, bounded: none may fetch once this started."""


def _pin(data: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return data.pin_memory()
    if isinstance(data, list | tuple):
        return type(data)(_pin(x) for x in data)
    if isinstance(data, dict):
        return {k: _pin(v) for k, v in data.items()}
    return data


class Iter:
    """The iterator: tasks from the sampler to the workers, results back in order."""

    def __init__(self, loader: Loader) -> None:
        tl = loader.torch
        self.sampler = tl.batch_sampler if tl.batch_sampler is not None else tl.sampler
        self.n = tl.num_workers
        self.window = (tl.prefetch_factor or 2) * self.n
        self.in_order = tl.in_order
        self.timeout = float(tl.timeout)
        self.pin = tl.pin_memory and torch.accelerator.is_available()
        # torch documents the worker seeds as base_seed + id, base_seed drawn from the loader's
        # generator once per iterator: drawn after the sampler's iterator is made (a shuffling
        # sampler draws lazily), as torch does, so a seeded generator gives torch's batches.
        self.tasks = iter(self.sampler)
        base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=tl.generator).item())
        self.transport: Transport | None = loader.start(loader.job(), base_seed)
        self.epoch = 0
        self.error: str | None = None
        self.begin()

    def begin(self) -> None:
        """Start the current epoch: fill the prefetch window."""
        self.send_idx = self.rcvd_idx = 0
        self.cursor = 0  # round robin over every worker, skipping retired ones
        self.outstanding: dict[int, int] = {}  # task -> worker, until handed out or skipped
        self.results: dict[int, Any] = {}
        self.active = set(range(self.n))
        self.sampler_done = self.ended = False
        while self.dispatch():
            pass

    def reset(self) -> None:
        """Persistent workers: a new epoch on the same workers; results of the old one that
        still arrive are recognised by their epoch and dropped."""
        if self.transport is None:
            raise RuntimeError("DataLoader iterator was shut down")
        self.epoch += 1
        self.tasks = iter(self.sampler)
        self.error = None
        self.begin()

    def dispatch(self) -> bool:
        if self.sampler_done or not self.active or len(self.outstanding) >= self.window:
            return False
        try:
            indices = next(self.tasks)
        except StopIteration:
            self.sampler_done = True
            return False
        while self.cursor % self.n not in self.active:
            self.cursor += 1
        worker = self.cursor % self.n
        self.cursor += 1
        assert self.transport is not None
        self.transport.send(worker, self.epoch, self.send_idx, indices)
        self.outstanding[self.send_idx] = worker
        self.send_idx += 1
        return True

    def __iter__(self) -> Iter:
        return self

    def __next__(self) -> Any:
        if self.error is not None:
            raise RuntimeError(self.error)  # fail-stop: every later call raises too
        if self.ended:
            raise StopIteration
        while True:
            task = self.ready()
            if task is not None:
                result = self.results.pop(task)
                del self.outstanding[task]
                self.dispatch()
                if isinstance(result, Exhausted):
                    continue
                if isinstance(result, Failure):
                    raise result.exception()
                return _pin(result) if self.pin else result
            if not self.outstanding:
                self.end()
                raise StopIteration
            self.receive()

    def ready(self) -> int | None:
        if not self.in_order:
            return min(self.results, default=None)
        while self.rcvd_idx < self.send_idx and self.rcvd_idx not in self.outstanding:
            self.rcvd_idx += 1
        if self.rcvd_idx in self.results:
            self.rcvd_idx += 1
            return self.rcvd_idx - 1
        return None

    def receive(self) -> None:
        assert self.transport is not None
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while True:
            got = self.transport.recv(WAIT_SLICE_S)
            dead = self.transport.dead()
            if dead is not None:
                self.fail(dead)
            if got is not None and self.wanted(got[0], got[1]):
                _, task, worker, result = got
                if isinstance(result, Exhausted) and worker in self.active:
                    self.active.discard(worker)
                    self.retired(worker)
                self.results[task] = result
                return
            if deadline is not None and time.monotonic() >= deadline:
                self.fail(f"DataLoader timed out after {self.timeout:g} seconds")

    def wanted(self, epoch: int, task: int) -> bool:
        """A result is this epoch's, for a task still outstanding (persistent workers may still
        send results of an epoch the user abandoned)."""
        return epoch == self.epoch and task in self.outstanding

    def retired(self, worker: int) -> None:
        """`worker` has no more batches this epoch: nothing to do but stop asking it."""

    def fail(self, text: str) -> None:
        """A worker death or a timeout: shut down and raise, now and at every later call."""
        self.error = text
        self.close()
        raise RuntimeError(text)

    def end(self) -> None:
        self.ended = True

    def close(self) -> None:
        if self.transport is not None:
            transport, self.transport = self.transport, None
            transport.close()

    def __del__(self) -> None:
        self.close()


class NonPersistentIter(Iter):
    """Without persistent workers the workers go as soon as the epoch ends."""

    def end(self) -> None:
        super().end()
        self.close()


class Loader:
    """torch's constructor (validation, samplers, `len`), a transport's workers."""

    iterator: type[Iter] = NonPersistentIter
    persistent_iterator: type[Iter] = Iter

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        self.torch = TorchLoader(dataset, **kwargs)
        self._iterator: Iter | None = None

    def job(self) -> Job:
        tl = self.torch
        return Job(
            dataset=tl.dataset,
            iterable=isinstance(tl.dataset, IterableDataset),
            auto=tl.batch_sampler is not None,
            batch_size=tl.batch_size,
            drop_last=tl.drop_last,
            collate=tl.collate_fn,
            init_fn=tl.worker_init_fn,
            num_workers=tl.num_workers,
        )

    def start(self, job: Job, base_seed: int) -> Transport:
        """Start `job.num_workers` workers (worker w's seed: `base_seed + w`)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.torch)

    def __iter__(self) -> Any:
        if self.torch.num_workers == 0:
            return iter(self.torch)  # no workers: torch's own single-process path
        if not self.torch.persistent_workers:
            return self.iterator(self)
        if self._iterator is None:
            self._iterator = self.persistent_iterator(self)
        else:
            self._iterator.reset()
        return self._iterator
