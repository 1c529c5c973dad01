"""Datasets and samplers that keep a state of their own, as a user of torchdata's `Stateful`
protocol writes them (`state_dict()` / `load_state_dict()`), for the resume cases.

Each is deterministic given what it draws from: its own position and epoch, or torch's RNG
(the global one in the loader's process, the worker's seeded one in a worker), so an
uninterrupted run is reproducible and a resumed run is graded against it item for item and value
for value. Each kind makes a wrong resume visible as other values, not only other positions:

* `self_iterating`: an IterableDataset that is its own iterator (`__iter__` resets its position
  and returns `self`); it advances an epoch counter when its iteration ends. A state restored
  before `iter(dataset)` is reset by it; a state dropped at an epoch's end restarts the counter.
* `epoch_counting`: an IterableDataset (a generator `__iter__`) whose items carry an epoch
  counter it advances when its iteration ends, and which it saves.
* `iterator_state`: an IterableDataset whose `iter()` returns an iterator with a state of its
  own: a generator seeded from torch's RNG when the iterator is made, whose draws are the items.
* `map_state`: a map-style dataset counting its own fetches (per process), saved.
* `random_items`: a map-style dataset whose items are drawn from torch's RNG (no state_dict:
  what a resumed worker draws depends on its seed and on what it drew before).
* `stateful_sampler`: a sampler with an epoch counter advanced at each `iter()`, the epoch's
  order drawn from `seed + epoch`; its iterator saves its position.
* `seeded_sampler_iter`: a sampler with no state whose iterator draws its seed from torch's
  global RNG when made (as `RandomSampler` without a generator), and saves it.
* `prefetched_iterable`, `slow_first_map`: no state of their own; worker 0's first item of
  every iterator waits (bounded: `WAIT_S`) until every other worker has fetched `AHEAD` items,
  so that when the first batch is handed out the others' batches are fetched and waiting
  (`prefetched_iterable`: an IterableDataset, worker w yielding `w * 100 + k`), or, with
  `in_order=False`, handed out before it (`slow_first_map`: item i is i). Each fetch is marked
  by a file in the `scratch` folder the player gives (none: no wait), named by the iterator's
  base seed, so the wait is an event, not a sleep that may lose a race.
* `reordered_map`: item i is i; worker 0's first item of every iterator waits (bounded:
  `WAIT_S`) until the player has handed a batch of that iterator to the user (its `HANDED`
  mark in `scratch`), so that with `in_order=False` another batch is handed out before it.

Everything is module-level and picklable: it reaches workers under every start method.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args

import torch
from loaderspec.faultinject import _fire
from torch.utils.data import Dataset, IterableDataset, Sampler

__all__ = [
    "HANDED",
    "USER_KINDS",
    "UserKind",
    "build",
    "mark_handed",
    "new_iterator",
]

UserKind = Literal[
    "self_iterating",
    "epoch_counting",
    "iterator_state",
    "map_state",
    "random_items",
    "stateful_sampler",
    "seeded_sampler_iter",
    "prefetched_iterable",
    "slow_first_map",
    "reordered_map",
]
USER_KINDS: tuple[UserKind, ...] = get_args(UserKind)
EPOCH_STRIDE = 10_000  # an item's value: epoch * EPOCH_STRIDE + its index
# Worker 0's first item waits until every other worker fetched AHEAD items (the cases' prefetch
# window with batch_size=1, prefetch_factor=2), at most WAIT_S (a loader that never fetches
# ahead: the case then plays without the wait).
AHEAD = 2
WAIT_S = 10.0
HANDED = "handed"  # the player's mark: a batch of the current iterator was handed out


def _my_indices(n: int) -> list[int]:
    """This process's share of range(n): worker w of W reads w, w + W, ..."""
    info = _fire.worker_info()
    first, step = (0, 1) if info is None else (info.id, info.num_workers)
    return list(range(first, n, step))


def _draw_seed() -> int:
    """A seed from torch's RNG in this process (a worker's is seeded by the loader)."""
    return int(torch.randint(2**31, ()))


class SelfIterating(IterableDataset[int]):
    """Its own iterator: `iter()` sets the position to the start of its share."""

    def __init__(self, n: int) -> None:
        self.n, self.pos, self.epoch = n, 0, 0

    def __iter__(self) -> SelfIterating:
        self.pos = 0
        return self

    def __next__(self) -> int:
        mine = _my_indices(self.n)
        if self.pos >= len(mine):
            self.epoch, self.pos = self.epoch + 1, 0
            raise StopIteration
        self.pos += 1
        return self.epoch * EPOCH_STRIDE + mine[self.pos - 1]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos, "epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.pos, self.epoch = int(state["pos"]), int(state["epoch"])


class EpochCounting(IterableDataset[int]):
    """A generator `__iter__`; the epoch counter advances when an iteration ends; a loaded
    position is where the next iteration starts (once)."""

    def __init__(self, n: int) -> None:
        self.n, self.read, self.epoch, self._start = n, 0, 0, 0

    def __iter__(self) -> Iterator[int]:
        start, self._start = self._start, 0
        self.read = start
        for i in _my_indices(self.n)[start:]:
            self.read += 1
            yield self.epoch * EPOCH_STRIDE + i
        self.epoch, self.read = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"read": self.read, "epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._start, self.epoch = int(state["read"]), int(state["epoch"])


class _DrawingIterator:
    """Draws its items from a generator seeded from torch's RNG when it is made."""

    def __init__(self, n: int) -> None:
        self.indices = _my_indices(n)
        self.pos = 0
        self.rng = torch.Generator().manual_seed(_draw_seed())

    def __iter__(self) -> _DrawingIterator:
        return self

    def __next__(self) -> int:
        if self.pos >= len(self.indices):
            raise StopIteration
        self.pos += 1
        return self.indices[self.pos - 1] * 1000 + int(torch.randint(1000, (), generator=self.rng))

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos, "rng": self.rng.get_state().tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.pos = int(state["pos"])
        self.rng.set_state(torch.tensor(state["rng"], dtype=torch.uint8))


class IteratorState(IterableDataset[int]):
    """`iter()` returns a `_DrawingIterator` (a state of its own); the dataset has none."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> _DrawingIterator:
        return _DrawingIterator(self.n)


class MapState(Dataset[int]):
    """Item i is `i * 1000 + how many items this copy fetched before`."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.calls += 1
        return i * 1000 + self.calls - 1

    def state_dict(self) -> dict[str, int]:
        return {"calls": self.calls}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.calls = int(state["calls"])


class RandomItems(Dataset[int]):
    """Item i is `i * 1000 + a draw from torch's RNG`; no state of its own."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i * 1000 + int(torch.randint(1000, ()))


class Plain(Dataset[int]):
    """Item i is i (the samplers' dataset)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class _OrderIterator:
    """An order, its position saved (and its seed, when it drew one)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.pos = n, seed, 0
        self.order = self._order()

    def _order(self) -> list[int]:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed)).tolist()

    def __iter__(self) -> _OrderIterator:
        return self

    def __next__(self) -> int:
        if self.pos >= self.n:
            raise StopIteration
        self.pos += 1
        return self.order[self.pos - 1]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos, "seed": self.seed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.pos, self.seed = int(state["pos"]), int(state["seed"])
        self.order = self._order()


class StatefulSampler(Sampler[int]):
    """Each `iter()` is a new epoch, its order drawn from `seed + epoch`."""

    def __init__(self, n: int, seed: int = 7) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> _OrderIterator:
        it = _OrderIterator(self.n, self.seed + self.epoch)
        self.epoch += 1
        return it

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.epoch = int(state["epoch"])


class SeededSampler(Sampler[int]):
    """No state; its iterator draws a seed from torch's global RNG when made."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> _OrderIterator:
        return _OrderIterator(self.n, _draw_seed())


class _Marks:
    """Each fetch of a worker marked by a file in `scratch`; worker 0's first waits."""

    scratch: str | None
    wait_for_hand_out = False  # worker 0's first waits for HANDED, not for the others' AHEAD

    def fetched(self) -> None:
        """Mark this worker's fetch; worker 0's first waits for the others' `AHEAD`."""
        info = _fire.worker_info()
        if info is None or self.scratch is None:
            return
        base = int(info.seed) - int(info.id)  # this iterator's (persistent: this loader's)
        mine = [f for f in os.listdir(self.scratch) if f.startswith(f"{base}-w{info.id}-")]
        count = len(mine) + 1
        if info.id == 0 and count == 1:
            others = [f"{base}-w{w}-{AHEAD}" for w in range(1, info.num_workers)]
            if self.wait_for_hand_out:
                others = [HANDED]
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                if all(os.path.exists(os.path.join(self.scratch, f)) for f in others):
                    break
                time.sleep(0.005)  # polling the condition, bounded: not a timed race
        with open(os.path.join(self.scratch, f"{base}-w{info.id}-{count}"), "x"):
            pass


class PrefetchedIterable(_Marks, IterableDataset[int]):
    """Worker w yields `w * 100 + k`, k < n // workers; worker 0's first item waits."""

    def __init__(self, n: int, scratch: str | None) -> None:
        self.n, self.scratch = n, scratch

    def __iter__(self) -> Iterator[int]:
        info = _fire.worker_info()
        wid, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for k in range(self.n // workers):
            self.fetched()
            yield wid * 100 + k


class SlowFirstMap(_Marks, Dataset[int]):
    """Item i is i; worker 0's first fetch waits."""

    def __init__(self, n: int, scratch: str | None) -> None:
        self.n, self.scratch = n, scratch

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.fetched()
        return i


class ReorderedMap(SlowFirstMap):
    """Item i is i; worker 0's first fetch waits for a batch handed out before it."""

    wait_for_hand_out = True


def build(kind: UserKind, n: int, scratch: str | None = None) -> tuple[Any, dict[str, Any]]:
    """A fresh dataset of `kind` over `n` items, and the loader arguments it comes with (a
    sampler); `scratch`: the folder the waiting kinds mark their fetches in.

    Raises:
        ValueError: `kind` is not one of `USER_KINDS`.
    """
    datasets: dict[str, type] = {
        "self_iterating": SelfIterating,
        "epoch_counting": EpochCounting,
        "iterator_state": IteratorState,
        "map_state": MapState,
        "random_items": RandomItems,
    }
    if kind in datasets:
        return datasets[kind](n), {}
    if kind == "prefetched_iterable":
        return PrefetchedIterable(n, scratch), {}
    if kind == "slow_first_map":
        return SlowFirstMap(n, scratch), {}
    if kind == "reordered_map":
        return ReorderedMap(n, scratch), {}
    if kind == "stateful_sampler":
        return Plain(n), {"sampler": StatefulSampler(n)}
    if kind == "seeded_sampler_iter":
        return Plain(n), {"sampler": SeededSampler(n)}
    raise ValueError(f"user state kind {kind!r}: pick one of {', '.join(USER_KINDS)}")


def new_iterator(scratch: str | None) -> None:
    """The player is about to call `iter()`: no batch of the new iterator handed out yet."""
    if scratch is not None and os.path.exists(os.path.join(scratch, HANDED)):
        os.remove(os.path.join(scratch, HANDED))


def mark_handed(scratch: str | None) -> None:
    """The player handed a batch of the current iterator to the user (`HANDED`)."""
    if scratch is not None:
        with open(os.path.join(scratch, HANDED), "a"):
            pass
