"""The benchmark's workload: module-level, picklable (spawn works), bounded in time.

The fault figures use faultinject's faulty datasets; this is the throughput workload only. Work
stops by itself after ``MAX_STALL_S``, so a benchmark that failed to clean up cannot leave a
process spinning for ever.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset

# The longest any item may work, in wall time.
MAX_STALL_S = 120.0


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
