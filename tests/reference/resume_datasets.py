"""Datasets for the resume tests (module-level, so spawned workers can import them).

Each may fail once at item ``fail_at``: a worker kills itself (SIGKILL: the loader raises a
worker's death), the loader's own process raises ``Crash``. ``flag`` (a file) makes it once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class Crash(Exception):
    """The fault of a run without workers: the user's process fails."""


def _fail_once(item: int, fail_at: int | None, flag: str | None) -> None:
    if item != fail_at or flag is None or Path(flag).exists():
        return
    Path(flag).touch()
    if get_worker_info() is not None:
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
    """``Shards`` with torchdata's Stateful protocol: its state is how far its shard went."""

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

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._loaded = state["pos"]
