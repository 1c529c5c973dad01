"""Datasets for the resume tests (module-level, so spawned workers can import them).

Each may fail once at item ``fail_at``: a worker kills itself (SIGKILL: the loader raises a
worker's death), the loader's own process raises ``Crash``. ``flag`` (a file) makes it once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, Sampler, get_worker_info

from loaderspec import tracewriter
from loaderspec.vocabulary import Action


class Crash(Exception):
    """The fault of a run without workers: the user's process fails."""


def _fail_once(item: int, fail_at: int | None, flag: str | None) -> None:
    if item != fail_at or flag is None or Path(flag).exists():
        return
    Path(flag).touch()
    if get_worker_info() is not None:
        # Logged first, as faultinject does (an unlogged death is not a behaviour of the spec),
        # by pid: a resumed IterableDataset's worker slot is not its shard's id.
        tracewriter.emit_fault(Action.FAULT_KILL_WORKER, worker=None, victim=os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
    raise Crash(f"fault at item {item}")


class Items(Dataset):
    """Item i is tensor(i)."""

    def __init__(self, n: int, fail_at: int | None = None, flag: str | None = None) -> None:
        self.n, self.fail_at, self.flag = n, fail_at, flag

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        _fail_once(i, self.fail_at, self.flag)
        return torch.tensor(i)


class Shards(IterableDataset):
    """Worker w of W yields w, w + W, ... below n (the whole range without workers). Not
    Stateful: a resume fast-forwards it."""

    def __init__(self, n: int, fail_at: int | None = None, flag: str | None = None) -> None:
        self.n, self.fail_at, self.flag = n, fail_at, flag

    def _shard(self) -> range:
        info = get_worker_info()
        w, num = (info.id, info.num_workers) if info is not None else (0, 1)
        return range(w, self.n, num)

    def __iter__(self) -> Any:
        for item in self._shard():
            _fail_once(item, self.fail_at, self.flag)
            yield torch.tensor(item)


class StatefulShards(Shards):
    """``Shards`` with torchdata's Stateful protocol: its state is where its next ``iter()``
    starts (a shard run dry starts the next from 0: a state taken then is loaded into the next
    epoch's dataset, as StatefulDataLoader loads it)."""

    def __init__(self, n: int, fail_at: int | None = None, flag: str | None = None) -> None:
        super().__init__(n, fail_at, flag)
        self.pos = 0
        self._loaded: int | None = None

    def __iter__(self) -> Any:
        start, self._loaded = self._loaded or 0, None
        self.pos = start
        for k, item in enumerate(self._shard()):
            if k < start:
                continue
            _fail_once(item, self.fail_at, self.flag)
            self.pos = k + 1
            yield torch.tensor(item)
        self.pos = 0

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._loaded = state["pos"]


# --- the user's own state (issue 35): datasets and iterators with torchdata's Stateful protocol


def shard_of(n: int) -> list[int]:
    """This worker's items of range(n): w, w + W, ... (all of them without workers)."""
    info = get_worker_info()
    w, num = (info.id, info.num_workers) if info is not None else (0, 1)
    return list(range(w, n, num))


def lcg(x: int) -> int:
    """One step of a 64-bit linear congruential generator (plain ints: a JSON-able state)."""
    return (x * 6364136223846793005 + 1442695040888963407) % 2**64


def draw_seed() -> int:
    """A seed drawn from torch's RNG: a worker's is seeded from the loader's base seed, the
    loader's process's from whatever the user seeded."""
    return int(torch.randint(0, 2**62, ()).item())


class SelfIterating(IterableDataset):
    """Its own iterator: ``__iter__`` rewinds it and returns it. Item k of the shard in epoch e
    is ``100 * e + item``; the epoch counter advances when the shard ends. Stateful: position
    and epoch (restored after ``iter()``, as StatefulDataLoader orders it)."""

    def __init__(self, n: int) -> None:
        self.n, self.pos, self.epoch, self._over = n, 0, 0, False

    def __iter__(self) -> SelfIterating:
        self.pos, self._over = 0, False
        return self

    def __next__(self) -> torch.Tensor:
        shard = shard_of(self.n)
        if self.pos >= len(shard):
            if not self._over:
                self._over = True
                self.epoch += 1
            raise StopIteration
        item = shard[self.pos]
        self.pos += 1
        return torch.tensor(100 * self.epoch + item)

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos, "epoch": self.epoch, "over": self._over}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.epoch, self._over = state["pos"], state["epoch"], state["over"]


class EpochCounting(IterableDataset):
    """A generator per ``iter()``; item of epoch e is ``100 * e + item``, the counter advancing
    when the shard ends. Stateful: its epoch and the position ``iter()`` resumes at."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch, self.pos = n, 0, 0

    def __iter__(self) -> Any:
        start = self.pos
        for k, item in enumerate(shard_of(self.n)):
            if k < start:
                continue
            self.pos = k + 1
            yield torch.tensor(100 * self.epoch + item)
        self.epoch += 1
        self.pos = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]


class _Walk:
    """An iterator with its own state: its items are drawn from an LCG seeded from torch's RNG
    when it was made, so only its saved state gives them back."""

    def __init__(self, items: list[int]) -> None:
        self.items, self.k, self.x = items, 0, draw_seed()

    def __iter__(self) -> _Walk:
        return self

    def __next__(self) -> torch.Tensor:
        if self.k >= len(self.items):
            raise StopIteration
        self.x = lcg(self.x)
        item = self.items[self.k]
        self.k += 1
        return torch.tensor([item, self.x % 1000])

    def state_dict(self) -> dict[str, int]:
        return {"k": self.k, "x": self.x}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.k, self.x = state["k"], state["x"]


class Walks(IterableDataset):
    """Not Stateful itself: ``iter()`` returns a ``_Walk``, which is."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> _Walk:
        return _Walk(shard_of(self.n))


class Noisy(Dataset):
    """Map-style with its own state: item i is ``[i, a draw]``, the draws from an LCG seeded
    (from torch's RNG, so from the worker's seed) at the first item; Stateful: the LCG."""

    def __init__(self, n: int) -> None:
        self.n, self.x = n, None  # type: int, int | None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.x is None:
            self.x = draw_seed()
        self.x = lcg(self.x)
        return torch.tensor([i, self.x % 1000])

    def state_dict(self) -> dict[str, int | None]:
        return {"x": self.x}

    def load_state_dict(self, state: dict[str, int | None]) -> None:
        self.x = state["x"]


class SeedTagged(Dataset):
    """Map-style, no state: item i is ``[i, the fetching worker's seed mod 1000]``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = get_worker_info()
        return torch.tensor([i, -1 if info is None else info.seed % 1000])


class EpochSampler(Sampler[int]):
    """A sampler with randomness of its own: each ``iter()`` a permutation seeded by its epoch
    counter, which then advances. Stateful: the counter."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch))
        self.epoch += 1
        return iter(order.tolist())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = state["epoch"]


class WorkerDraws(IterableDataset):
    """No state of its own: each item is ``[item, a draw from the process's torch RNG]`` (a
    worker's is seeded from the base seed, and goes on from epoch to epoch in a persistent
    worker)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Any:
        for item in shard_of(self.n):
            yield torch.tensor([item, int(torch.randint(0, 1000, ()).item())])
