"""A correct thread-based loader: `num_workers` threads of the loader's own process, one inbox
queue each, one result queue.

torch 2.13's `get_worker_info()` reads one process-wide variable; torch's main branch answers
per thread. On import this module installs that per-thread answer (a thread-local, falling back
to torch's own), as loaders with thread workers on older torch do. A thread cannot be killed:
shutdown tells every thread to stop, waits a bounded time, and leaves a thread stuck in the
user's code behind (a daemon thread: it ends when its fetch returns, and fetches nothing more).
Seeds: a thread cannot have its own `torch.initial_seed()`; `get_worker_info().seed` is
torch's `base_seed + id`.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import torch.utils.data
import torch.utils.data.dataloader
from torch.utils.data._utils import worker as torch_worker

from correct._protocol import Job, Transport, Worker, worker_info
from correct._protocol import Loader as _Base

__all__ = ["Loader", "Threads"]

JOIN_S = 0.2  # shutdown waits this long in all for the threads, then leaves the stuck ones

_local = threading.local()
_torch_get_worker_info = torch_worker.get_worker_info


def get_worker_info() -> Any:
    """torch's `get_worker_info()`, answered per thread."""
    info = getattr(_local, "info", None)
    return info if info is not None else _torch_get_worker_info()


for _module in (torch.utils.data, torch.utils.data.dataloader, torch_worker):
    # Installing a per-thread get_worker_info where torch looks it up.
    _module.get_worker_info = get_worker_info  # type: ignore[attr-defined]


def _work(
    job: Job,
    worker_id: int,
    seed: int,
    inbox: queue.Queue,
    results: queue.Queue,
    done: threading.Event,
) -> None:
    _local.info = worker_info(job, worker_id, seed, "thread")
    worker = Worker(job, worker_id, f"in DataLoader worker thread {worker_id}")
    while True:
        msg = inbox.get()
        if msg is None or done.is_set():  # no fetch once shutdown began
            return
        epoch, task, indices = msg
        results.put((epoch, task, worker_id, worker.handle(epoch, indices)))


class Threads:
    """The transport: threads and queues. It holds no reference to the iterator, so dropping
    the iterator shuts the threads down."""

    def __init__(self, job: Job, base_seed: int) -> None:
        self.done = threading.Event()
        self.results: queue.Queue = queue.Queue()
        self.inboxes: list[queue.Queue] = [queue.Queue() for _ in range(job.num_workers)]
        self.threads = [
            threading.Thread(
                target=_work,
                args=(job, w, base_seed + w, self.inboxes[w], self.results, self.done),
                name=f"loader-worker-{w}",
                daemon=True,
            )
            for w in range(job.num_workers)
        ]
        for t in self.threads:
            t.start()

    def send(self, worker: int, epoch: int, task: int, indices: Any) -> None:
        self.inboxes[worker].put((epoch, task, indices))

    def recv(self, timeout_s: float) -> tuple[int, int, int, Any] | None:
        try:
            return self.results.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def dead(self) -> str | None:
        for w, t in enumerate(self.threads):
            if not t.is_alive():
                return f"DataLoader worker thread {w} exited unexpectedly"
        return None

    def close(self) -> None:
        self.done.set()
        for inbox in self.inboxes:
            inbox.put(None)
        deadline = time.monotonic() + JOIN_S
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))


class Loader(_Base):
    """torch's DataLoader arguments; `num_workers` threads (declared nowhere: the harness finds
    out by watching where the fetches run)."""

    def start(self, job: Job, base_seed: int) -> Transport:
        return Threads(job, base_seed)
