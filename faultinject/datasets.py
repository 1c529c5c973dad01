"""Datasets that carry faults into a loader's workers.

The dataset is the one piece of user code every loader runs inside its workers, so it is how a
fault gets into a foreign loader without touching its internals. Both datasets are plain picklable
objects (paths and frozen dataclasses only), so they work under fork, spawn and forkserver, and in
torch's, the reference's and torchdata's loaders (paddle's through its adapter).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from loaderspec.faultinject import _fire
from loaderspec.faultinject.faults import (
    COLLATE_POINTS,
    EVERY,
    Die,
    Fault,
    Hang,
    Raise,
    RaiseUnrebuildable,
    SkewWorker,
    Sleep,
    Unloadable,
    UnloadableItem,
    Unpicklable,
    UnpicklableItem,
)
from loaderspec.faultinject.records import Fetch, next_epoch_hint, write_fetch
from torch.utils.data import Dataset, IterableDataset, Sampler

__all__ = [
    "SHARD_STRIDE",
    "EpochIndexed",
    "EpochSampler",
    "FaultyDataset",
    "FaultyIterable",
    "Tensors",
    "Wide",
    "identity",
]

# FaultyIterable's item values: shard w yields w * SHARD_STRIDE + k.
SHARD_STRIDE = 1_000_000


def identity(index: int) -> int:
    """The default item: the index itself (module-level, so it pickles)."""
    return index


class EpochSampler(Sampler[int]):
    """The sampler of an epoch-tagged plan: `FaultyDataset(n * epochs, item=EpochIndexed(n))`.

    Each `iter()` reads the epoch from the file `path` (whoever drives the loader writes it before
    each `iter(loader)`) and yields `epoch * n + i` for i in 0..n-1. The sampler runs in the main
    process when a task is dispatched, so every index says the epoch it was dispatched in: a
    result of an abandoned epoch is recognisable however late it is fetched.
    """

    def __init__(self, n: int, path: str | os.PathLike[str]) -> None:
        self.n = n
        self.path = os.fspath(path)

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        with open(self.path) as f:
            epoch = int(f.read() or 0)
        return iter(range(epoch * self.n, (epoch + 1) * self.n))


class EpochIndexed:
    """An `item` for `FaultyDataset` under an `EpochSampler(n, ...)`: index -> `[index % n,
    index // n]`, the item and the epoch its task was dispatched in."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, index: int) -> list[int]:
        return [index % self.n, index // self.n]


class Tensors:
    """An `item` for `FaultyDataset`: index -> `count` one-element tensors. Under torch's
    `file_descriptor` sharing strategy each tensor in flight holds a file descriptor, so a few
    such items exhaust a low RLIMIT_NOFILE (pytorch#973)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, index: int) -> list[torch.Tensor]:
        return [torch.full((1,), float(index)) for _ in range(self.count)]


class Wide:
    """An `item` for `FaultyDataset`: index -> one float64 tensor of `width` values, all the
    index. At 8192 values (64 KiB) a collated batch takes the shared-memory path of a loader
    that has one (torch collates into /dev/shm, the reference into its slots)."""

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, index: int) -> torch.Tensor:
        return torch.full((self.width,), float(index), dtype=torch.float64)


def _remove_dir(path: str, owner_pid: int) -> None:
    # Only the process that created the dir removes it: forked workers inherit the finalizer.
    if os.getpid() == owner_pid:
        shutil.rmtree(path, ignore_errors=True)


class _Faulty:
    """What both datasets share: the fault list, the state and record dirs, and the fetch path."""

    faults: tuple[Fault, ...]
    record_dir: str | None
    state_dir: str | None
    cost_s: float
    home_pid: int  # the process that built the dataset: a Die never fires there
    home_tid: int  # the thread that built it: a fetch elsewhere is a worker's (`_fire.in_worker`)

    def _setup(
        self,
        faults: Sequence[Fault],
        cost_s: float,
        record_dir: str | os.PathLike[str] | None,
        state_dir: str | os.PathLike[str] | None,
    ) -> None:
        self.faults = tuple(faults)
        self.cost_s = float(cost_s)
        self.home_pid = os.getpid()
        self.home_tid = threading.get_ident()
        self.record_dir = None if record_dir is None else os.fspath(record_dir)
        if self.record_dir is not None:
            os.makedirs(self.record_dir, exist_ok=True)
        if state_dir is None and any(f.once for f in self.faults):
            if self.record_dir is not None:
                state_dir = os.path.join(self.record_dir, "once")
            else:
                state_dir = tempfile.mkdtemp(prefix="faultinject-state-")
                weakref.finalize(self, _remove_dir, state_dir, os.getpid())
        self.state_dir = None if state_dir is None else os.fspath(state_dir)
        if self.state_dir is not None:
            os.makedirs(self.state_dir, exist_ok=True)

    def _record(self, index: int, k: int | None, event: str = "fetch") -> None:
        if self.record_dir is None:
            return
        hint = next_epoch_hint(self.record_dir, index) if event == "fetch" else -1
        wid = _fire.worker_id()
        tid = threading.get_native_id()
        fetch = Fetch(time.monotonic(), os.getpid(), wid, index, hint, event=event, k=k, tid=tid)
        write_fetch(self.record_dir, fetch)

    def _fault_record(self, name: str, index: int, k: int | None) -> None:
        _fire.record_fault(self.record_dir, name, index, k)

    def _fetch(self, at: int, index: int, k: int | None, make: Callable[[], Any]) -> Any:
        """Produce one item: skew, record, cost, the faults for position `at`, then `make()`,
        then the `"fetched"` record.

        `at` is what faults match (the index, or the position in the shard; a fault at `EVERY`
        matches all); `index` is what the records call the item.
        """
        wid = _fire.worker_id()
        skews = [f for f in self.faults if isinstance(f, SkewWorker)]
        if skews and wid is None and _fire.in_worker(self.home_pid, self.home_tid):
            wid = _fire.ordinal(self.state_dir or self.record_dir)  # a worker without worker info
        for f in skews:
            if f.worker_id == wid:
                time.sleep(f.seconds)
        self._record(index, k)
        if self.cost_s > 0:
            time.sleep(self.cost_s)
        mine = [f for f in self.faults if not isinstance(f, SkewWorker) and f.at in (at, EVERY)]
        for fault in mine:
            self._before(fault, index, k)
        item = make()
        for fault in mine:
            item = self._after(fault, index, k, item)
        self._record(index, k, "fetched")
        return item

    def _before(self, f: Fault, index: int, k: int | None) -> None:
        """Fire `f` before item `index` is made, if it fires there (its row of `_BEFORE`)."""
        fire = _BEFORE.get(type(f))
        if fire is not None:
            fire(self, f, index, k)

    def _after(self, f: Fault, index: int, k: int | None, item: Any) -> Any:
        """Fire `f` once item `index` is made, if it fires there (its row of `_AFTER`): the item
        to return (a stand-in for an unpicklable or unloadable one, oversized bytes)."""
        fire = _AFTER.get(type(f))
        return item if fire is None else fire(self, f, index, k, item)

    def _claimed(self, f: Fault, k: int | None) -> bool:
        """Whether `f` fires now: its once-only claim is ours."""
        return _fire.claim_once(self.state_dir, f, k)

    def _claimed_here(self, f: Die | Hang, k: int | None) -> bool:
        """Whether `f` fires now, in this process (not the loader's own, which it would kill or
        hang): its once-only claim is ours."""
        return _fire.may_fire_here(f, self.home_pid, self.home_tid) and self._claimed(f, k)

    # ---- before the item is made: one row per fault type

    def _die_before(self, f: Die, index: int, k: int | None) -> None:
        if f.point == "before_fetch" and self._claimed_here(f, k):
            self._fault_record("Die:before_fetch", index, k)
            _fire.fire_die(f)

    def _hang(self, f: Hang, index: int, k: int | None) -> None:
        if self._claimed_here(f, k):
            self._fault_record("Hang", index, k)
            _fire.fire_hang(f)

    def _sleep(self, f: Sleep, index: int, k: int | None) -> None:
        if self._claimed(f, k):
            self._fault_record("Sleep", index, k)
            time.sleep(f.seconds)

    def _raise(self, f: Raise | RaiseUnrebuildable, index: int, k: int | None) -> None:
        if getattr(f, "point", "in_fetch") == "in_fetch" and self._claimed(f, k):
            self._fault_record(type(f).__name__, index, k)
            _fire.fire_raise(f)

    # ---- once the item is made

    def _unpicklable(self, f: Unpicklable, index: int, k: int | None, item: Any) -> Any:
        if not self._claimed(f, k):
            return item
        self._fault_record("Unpicklable", index, k)
        return UnpicklableItem(index)

    def _unloadable(self, f: Unloadable, index: int, k: int | None, item: Any) -> Any:
        if not self._claimed(f, k):
            return item
        self._fault_record("Unloadable", index, k)
        return UnloadableItem(index)

    def _arm_collate(self, f: Raise, index: int, k: int | None, item: Any) -> Any:
        if f.point == "in_collate":
            _fire.arm_collate(f.at)  # once-only is claimed by collate, where it fires
        return item

    def _die_after(self, f: Die, index: int, k: int | None, item: Any) -> Any:
        if not _fire.may_fire_here(f, self.home_pid, self.home_tid):
            return item
        if f.point == "after_fetch" and _fire.claim_once(self.state_dir, f, k):
            self._fault_record("Die:after_fetch", index, k)
            _fire.fire_die(f)
        elif f.point in COLLATE_POINTS:
            # Once-only is claimed by collate, where the fault fires.
            _fire.arm_collate(f.at)
        elif f.point == "blocked_put" and _fire.claim_once(self.state_dir, f, k):
            if f.signal is None:
                self._fault_record("Die:blocked_put:harness", index, k)
            else:
                _fire.die_when_blocked(f, self.record_dir, index, k)
            return bytes(f.blocked_put_bytes)
        elif f.point == "idle" and _fire.claim_once(self.state_dir, f, k):
            _fire.die_when_idle(f, self.record_dir, index, k)
        return item


# Where each fault type fires in a fetch: before the item is made, or once it is (a type with no
# row does not fire there; SkewWorker is applied before both, by `_fetch`).
_BEFORE: dict[type, Callable[[_Faulty, Any, int, int | None], None]] = {
    Die: _Faulty._die_before,
    Hang: _Faulty._hang,
    Sleep: _Faulty._sleep,
    Raise: _Faulty._raise,
    RaiseUnrebuildable: _Faulty._raise,
}
_AFTER: dict[type, Callable[[_Faulty, Any, int, int | None, Any], Any]] = {
    Unpicklable: _Faulty._unpicklable,
    Unloadable: _Faulty._unloadable,
    Raise: _Faulty._arm_collate,
    Die: _Faulty._die_after,
}


def _const(value: Any) -> Callable[[], Any]:
    """A maker of `value` (bound now, not when called)."""
    return lambda: value


class FaultyDataset(_Faulty, Dataset[Any]):
    """A map-style dataset of `n` items, `item(index)` each (the index by default), with faults.

    Args:
        n: the dataset's length.
        faults: `faultinject.faults` instances; each fires when its `at` index is fetched.
        item: index -> item; must pickle (a module-level function) under spawn/forkserver.
        cost_s: seconds every fetch takes (simulated work).
        record_dir: where to append fetch records (`faultinject.records.read_fetches`).
        state_dir: where once-only faults leave their markers; defaults to `record_dir/once`, or a
            temporary dir removed when the dataset is collected in the process that made it.
    """

    def __init__(
        self,
        n: int,
        faults: Sequence[Fault] = (),
        *,
        item: Callable[[int], Any] = identity,
        cost_s: float = 0.0,
        record_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if n < 0:
            raise ValueError(f"FaultyDataset needs n >= 0, got {n}")
        self.n = n
        self.item = item
        self._setup(faults, cost_s, record_dir, state_dir)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if not 0 <= index < self.n:
            raise IndexError(f"FaultyDataset index {index} out of range [0, {self.n})")
        return self._fetch(index, index, None, lambda: self.item(index))

    def __repr__(self) -> str:
        return f"FaultyDataset({self.n}, faults={list(self.faults)!r})"


class FaultyIterable(_Faulty, IterableDataset[Any]):
    """An iterable dataset of uneven shards: shard w yields `shard_lengths[w]` items
    `w * 1_000_000 + k`.

    Worker w of n yields shards w, w + n, w + 2n, ... (so with `len(shard_lengths)` workers, shard
    w is worker w's); with no workers (the main process) it yields every shard in order. A fault's
    `at` is the position `k` within a shard, so `Die(at=3)` fires in every worker that reaches its
    fourth item (use `once=True` for one worker only). Records use the item value as `index`.
    """

    def __init__(
        self,
        shard_lengths: Sequence[int],
        faults: Sequence[Fault] = (),
        *,
        cost_s: float = 0.0,
        record_dir: str | os.PathLike[str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if any(n < 0 for n in shard_lengths):
            raise ValueError(f"shard lengths must be >= 0, got {list(shard_lengths)}")
        if any(n >= SHARD_STRIDE for n in shard_lengths):
            raise ValueError(f"a shard holds at most {SHARD_STRIDE - 1} items")
        self.shard_lengths = tuple(int(n) for n in shard_lengths)
        self._setup(faults, cost_s, record_dir, state_dir)

    def shards_of(self, worker: int | None, num_workers: int) -> list[int]:
        """The shards worker `worker` of `num_workers` yields (all of them for None)."""
        if worker is None:
            return list(range(len(self.shard_lengths)))
        return list(range(worker, len(self.shard_lengths), num_workers))

    def expected(self, worker: int | None = None, num_workers: int = 1) -> list[int]:
        """The items worker `worker` yields, in order (all items for None)."""
        shards = self.shards_of(worker, num_workers)
        return [w * SHARD_STRIDE + k for w in shards for k in range(self.shard_lengths[w])]

    def __iter__(self) -> Iterator[Any]:
        info = _fire.worker_info()
        if info is None:
            shards = self.shards_of(None, 1)
        else:
            shards = self.shards_of(info.id, info.num_workers)
        for w in shards:
            for k in range(self.shard_lengths[w]):
                value = w * SHARD_STRIDE + k
                yield self._fetch(k, value, k, _const(value))

    def __repr__(self) -> str:
        return f"FaultyIterable({list(self.shard_lengths)}, faults={list(self.faults)!r})"
