"""The benchmark's datasets: module-level, picklable (spawn works), bounded in time.

Each one is the smallest thing that produces one workload or one fault; none knows which loader
reads it. Anything that waits or spins stops by itself after ``MAX_STALL_S``, so a benchmark
that failed to clean up cannot leave a process running for ever.
"""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset

# The longest any item may stall (hang or spin). Scenarios kill stalled workers long before.
MAX_STALL_S = 120.0


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` of wall time: CPU work that no signal-free wait can interrupt."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def work(cpu_seconds: float) -> None:
    """Spin until this thread has used ``cpu_seconds`` of CPU time: a fixed amount of work.

    Not wall time: on a loaded machine a wall-clock spin that is preempted does less work the
    longer it waits, which would make "1 ms of work" depend on the neighbours' load. Bounded by
    ``MAX_STALL_S`` of wall time all the same.
    """
    end = time.thread_time() + cpu_seconds
    give_up = time.monotonic() + MAX_STALL_S
    while time.thread_time() < end and time.monotonic() < give_up:
        pass


class Floats(Dataset[torch.Tensor]):
    """``n`` items of 64 floats; ``cost_s`` of CPU work per item (0: cheap, 0.001: costly)."""

    def __init__(self, n: int, cost_s: float = 0.0, width: int = 64) -> None:
        self.n = n
        self.cost_s = cost_s
        self.width = width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.cost_s:
            work(self.cost_s)
        return torch.full((self.width,), float(index))


class Sleepy(Dataset[int]):
    """``n`` items that each take ``delay_s`` of sleep: workers are always mid-task."""

    def __init__(self, n: int, delay_s: float) -> None:
        self.n = n
        self.delay_s = delay_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        time.sleep(self.delay_s)
        return index


class HangAt(Dataset[int]):
    """``n`` instant items, except ``index``: it writes ``<pid>\\n`` to the FIFO ``fifo``, then
    sleeps (a stuck worker) for ``MAX_STALL_S``. The line says the worker is stuck *now*."""

    def __init__(self, n: int, index: int, fifo: str) -> None:
        self.n = n
        self.index = index
        self.fifo = fifo

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if index == self.index:
            with open(self.fifo, "w") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(MAX_STALL_S)
        return index


class Busy(Dataset[int]):
    """Every item spins for ``MAX_STALL_S``, after writing ``<pid>\\n`` to the FIFO ``fifo``.

    The line tells the benchmark (which holds the FIFO's read end) that this worker is inside
    ``__getitem__`` before it kills the parent: an event, not a timing guess. Works for fork
    and spawn workers alike, since a path crosses both.
    """

    def __init__(self, n: int, fifo: str) -> None:
        self.n = n
        self.fifo = fifo

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        with open(self.fifo, "w") as f:
            f.write(f"{os.getpid()}\n")
        spin(MAX_STALL_S)
        return index


class Blobs(Dataset[bytes]):
    """Items of ``nbytes`` of plain bytes, after writing ``<pid>\\n`` to the FIFO ``fifo``.

    Bytes, not tensors: torch moves a tensor through shared memory and a file descriptor, so
    only a non-tensor payload fills its result pipe. A loader whose consumer reads nothing then
    has workers blocked writing to a full pipe (or queued behind the one that is).
    """

    def __init__(self, n: int, nbytes: int, fifo: str) -> None:
        self.n = n
        self.nbytes = nbytes
        self.fifo = fifo

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> bytes:
        with open(self.fifo, "w") as f:
            f.write(f"{os.getpid()}\n")
        return bytes(self.nbytes)
