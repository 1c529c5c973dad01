"""A correct `concurrent.futures.ProcessPoolExecutor`-based loader: one single-process executor
per worker (so each worker keeps its own state, an IterableDataset's shard among it), batches
handed back as files.

What an executor does not give, and how this loader makes up for it:

* A worker killed while it writes a result into the executor's result pipe leaves a torn
  message, and the executor's manager thread then blocks for ever reading the rest of it (the
  loader's process holds the pipe's write end too, so no EOF comes). Here no message can be
  torn: a worker writes a batch bigger than `INLINE_MAX` into a file of the loader's directory
  and returns its name; what goes through the pipe is always under `PIPE_BUF`, written in one
  `write()`, which a pipe makes whole or not at all.
* A dead worker fails its executor's futures with `BrokenProcessPool`, but only the pending
  ones: an idle worker's death shows nowhere until the next task. The loader opens a pidfd per
  worker when the executor starts it, and a waiting `next()` raises once one is readable.
* Workers do not watch their parent: the initializer starts a watchdog thread, on a pidfd of
  the loader's process (under forkserver that is not the worker's parent), which removes the
  loader's directory and ends the worker.
* The tasks already in an executor's call queue run even after `shutdown(cancel_futures=True)`:
  shutdown first creates `done` in the loader's directory, and a worker that finds it fetches
  nothing.
* `shutdown(wait=True)` waits for a worker stuck in the user's code for ever: shutdown waits
  `JOIN_S` for the workers to exit, SIGKILLs the rest through their pidfds, then joins each
  executor's thread (bounded).
* torch's `default_collate` puts a worker's batch in a /dev/shm segment that it unlinks right
  after creating it; a worker SIGKILLed between the two leaves the segment behind. Batches
  cross as plain pickled bytes here, so workers collate into private memory.

Two private attributes of `ProcessPoolExecutor` are read: `_processes` (the worker's pid, right
after the first `submit()` started it), for the pidfd, and `_executor_manager_thread` (which
`shutdown()` forgets), joined with a bound at shutdown.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import pickle
import queue
import random
import select
import shutil
import signal
import tempfile
import threading
import time
from functools import partial
from typing import Any

import torch
from torch.utils.data._utils import worker as torch_worker

from correct._protocol import Failure, Job, Transport, Worker, unpacked, worker_info
from correct._protocol import Loader as _Base

__all__ = ["Executors", "Loader"]

JOIN_S = 0.3  # shutdown waits this long in all for the workers to exit, then SIGKILLs them
THREADS_S = 5.0  # how long shutdown waits for the executors' threads once the workers are gone
# A result up to this size goes through the executor's pipe (with the executor's own envelope
# it stays under PIPE_BUF, 4096 on Linux: one atomic write); a bigger one goes by file.
DONE = "done"

_worker: Worker | None = None  # the worker process's state, set by the initializer
_directory = ""  # the loader's directory, set by the initializer


def _watch_parent(parent: int, directory: str) -> None:
    """End this worker when the loader's process exits, and remove the directory it would have
    removed. A pidfd: under forkserver the loader's process is not this worker's parent."""
    with contextlib.suppress(OSError):
        select.select([os.pidfd_open(parent)], [], [])
    shutil.rmtree(directory, ignore_errors=True)
    os._exit(1)


def _private_storage(cls: Any, size: int, *, device: Any = "cpu") -> torch.UntypedStorage:
    return torch.UntypedStorage(size, device=device)


def _init(job: Job, worker_id: int, seed: int, directory: str, parent: int) -> None:
    """The executor's initializer: this process becomes worker `worker_id`. It must not raise
    (the executor would mark itself broken): the user's worker_init_fn error is kept by
    `Worker` and answered to every task."""
    global _worker, _directory
    # Replacing torch's classmethod in the worker processes (see _private_storage).
    torch.UntypedStorage._new_shared = classmethod(_private_storage)  # type: ignore[method-assign,assignment]
    threading.Thread(target=_watch_parent, args=(parent, directory), daemon=True).start()
    # As torch's workers do: a forked child of a process that used OpenMP's thread pool hangs in
    # its first parallel region (a 100000-element collate did, here).
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    random.seed(seed)
    # torch has no setter; this is the variable its get_worker_info() reads in a process.
    torch_worker._worker_info = worker_info(job, worker_id, seed, "multiprocessing")
    _directory = directory
    _worker = Worker(job, worker_id, f"in DataLoader worker process {worker_id}")


def _started() -> None:
    """The first task of every executor: it makes the executor start its worker now, as torch
    starts every worker at `iter()`, whether or not the epoch has a batch for it."""


def _task(epoch: int, task: int, indices: Any) -> bytes | str | None:
    """One task's result, pickled here (tensors by value), or the name of the file holding it;
    None once shutdown began (no fetch then)."""
    assert _worker is not None
    if os.path.exists(os.path.join(_directory, DONE)):
        return None
    return _worker.packed(epoch, task, indices, _directory)


def _context(context: Any) -> Any:
    if isinstance(context, str | None):
        return multiprocessing.get_context(context)
    return context


class Executors:
    """The transport: `num_workers` executors of one process each; results come back through
    the futures' callbacks (run in the executors' threads) into one queue."""

    def __init__(self, job: Job, base_seed: int, context: Any) -> None:
        self.directory = tempfile.mkdtemp(prefix="loaderspec-executors-")
        self.results: queue.Queue[bytes | str] = queue.Queue()
        self.executors: list[concurrent.futures.ProcessPoolExecutor] = []
        self.pidfds: list[tuple[int, int | None]] = []  # (pid, pidfd: None once it was gone)
        self.threads: list[threading.Thread] = []  # each executor's manager thread
        for w in range(job.num_workers):
            initargs = (job, w, base_seed + w, self.directory, os.getpid())
            executor = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=_context(context), initializer=_init, initargs=initargs
            )
            executor.submit(_started)
            self.executors.append(executor)
            self.pidfds.append(self._open(executor))
            # Kept: shutdown() forgets it, and then it is joined here, bounded.
            self.threads.append(executor._executor_manager_thread)  # type: ignore[attr-defined]

    @staticmethod
    def _open(executor: concurrent.futures.ProcessPoolExecutor) -> tuple[int, int | None]:
        (pid,) = executor._processes  # started by the first submit()
        try:
            return pid, os.pidfd_open(pid)
        except ProcessLookupError:  # already dead and reaped: dead() reports it
            return pid, None

    def send(self, worker: int, epoch: int, task: int, indices: Any) -> None:
        try:
            future = self.executors[worker].submit(_task, epoch, task, indices)
        except concurrent.futures.BrokenExecutor:
            return  # its worker died: dead() reports it
        future.add_done_callback(partial(self._done, epoch, task, worker))

    def _done(self, epoch: int, task: int, worker: int, future: concurrent.futures.Future) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, concurrent.futures.BrokenExecutor):
            return  # its worker died: dead() reports it, naming the pid
        if exc is not None:  # the executor could not run the task
            failure = Failure(exc, f"in DataLoader worker process {worker}")
            self.results.put(pickle.dumps((epoch, task, worker, failure)))
        elif future.result() is not None:
            self.results.put(future.result())

    def recv(self, timeout_s: float) -> tuple[int, int, int, Any] | None:
        try:
            got = self.results.get(timeout=timeout_s)
        except queue.Empty:
            return None
        return unpacked(got)

    def dead(self) -> str | None:
        for pid, fd in self.pidfds:
            if fd is None or select.select([fd], [], [], 0)[0]:
                return f"DataLoader worker (pid {pid}) exited unexpectedly"
        return None

    def close(self) -> None:
        # `done` first: a task already in a call queue fetches nothing from now on.
        os.close(os.open(os.path.join(self.directory, DONE), os.O_WRONLY | os.O_CREAT, 0o600))
        for executor in self.executors:
            executor.shutdown(wait=False, cancel_futures=True)
        fds = [fd for _, fd in self.pidfds if fd is not None]
        deadline = time.monotonic() + JOIN_S
        while fds and time.monotonic() < deadline:
            exited = select.select(fds, [], [], max(0.0, deadline - time.monotonic()))[0]
            fds = [fd for fd in fds if fd not in exited]
        for fd in fds:  # still running (stuck in the user's code): killed, by pidfd
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        # Each executor's thread sees its worker exit, joins it and ends: joined here, bounded
        # (shutdown(wait=True) has no timeout, and a thread started to bound it would never run
        # when this is the interpreter's exit).
        deadline = time.monotonic() + THREADS_S
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for _, fd in self.pidfds:
            if fd is not None:
                os.close(fd)
        self.pidfds = []
        shutil.rmtree(self.directory, ignore_errors=True)


class Loader(_Base):
    """torch's DataLoader arguments; `num_workers` single-process executors."""

    loaderspec_workers = "processes"

    def start(self, job: Job, base_seed: int) -> Transport:
        return Executors(job, base_seed, self.torch.multiprocessing_context)
