"""Small datasets for the shell tests (module-level, so spawned workers can import them)."""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class Squares(Dataset):
    """Item i is tensor([i, i*i]); ``raise_at`` indices raise ValueError; ``hang_at`` hang."""

    def __init__(
        self,
        n: int,
        raise_at: tuple[int, ...] = (),
        hang_at: tuple[int, ...] = (),
        hanging: Any = None,
    ) -> None:
        self.n = n
        self.raise_at = raise_at
        self.hang_at = hang_at
        self.hanging = hanging  # a multiprocessing Event, set when a hang begins

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i in self.raise_at:
            raise ValueError(f"bad item {i}")
        if i in self.hang_at:
            if self.hanging is not None:
                self.hanging.set()
            threading.Event().wait()  # blocks forever, like a stuck read
        return torch.tensor([i, i * i])


class Busy(Dataset):
    """Item ``busy_at`` spins in Python forever (a worker busy inside ``__getitem__``)."""

    def __init__(self, n: int, busy_at: int) -> None:
        self.n, self.busy_at = n, busy_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        while i == self.busy_at:
            pass
        return torch.full((1 << 20,), float(i))  # 4 MiB: a few fill the result pipe


class Slow(Dataset):
    """Item i is tensor([i]) after ``cost_s`` seconds of work (a sleep standing in for IO)."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        threading.Event().wait(self.cost_s)
        return torch.tensor([i])


class Locks(Dataset):
    """Item i is i, except item ``bad`` is a lock (cannot be pickled)."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return threading.Lock() if i == self.bad else i


class Seeds(Dataset):
    """What a worker sees: its ``get_worker_info()``, its seed, one draw of each RNG, the item."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[int, int, int, bool, float, float, float, int]:
        info = get_worker_info()
        return (
            info.id if info else -1,
            info.seed if info else -1,
            info.num_workers if info else 0,
            info.dataset is self if info else False,  # the worker's own copy
            random.random(),
            float(torch.rand(())),
            float(np.random.rand()),
            i,
        )


class Shards(IterableDataset):
    """Worker w yields ``lengths[w]`` items w*100+k (all shards in turn with no workers)."""

    def __init__(self, lengths: tuple[int, ...]) -> None:
        self.lengths = lengths

    def __iter__(self):
        info = get_worker_info()
        ws = [info.id] if info else range(len(self.lengths))
        for w in ws:
            yield from (w * 100 + k for k in range(self.lengths[w]))

    def __len__(self) -> int:
        return sum(self.lengths)


class Pids(Dataset):
    """Item i is (worker pid, i)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[int, int]:
        return os.getpid(), i


def failing_init(worker_id: int) -> None:
    if worker_id == 1:
        raise RuntimeError("init failed in worker 1")


def failing_collate(batch: list) -> list:
    if any(int(x[0]) == 4 for x in batch):
        raise KeyError("collate refuses 4")
    return batch
