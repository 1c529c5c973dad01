"""A correct hand-rolled process loader: `os.fork()` per worker, three pipes each (tasks in,
results out, and a "done" pipe whose write end the main process closes to stop the worker),
length-prefixed pickles on them.

The main process reaps its workers itself (`waitpid`): an exit it did not ask for is a worker
death. Each worker has a watchdog thread that ends it when its parent is gone, whatever it is
doing. It forks, so it refuses the spawn and forkserver contexts (NotImplementedError: SKIP).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import select
import signal
import struct
import threading
import time
from typing import Any

import torch
from torch.utils.data._utils import worker as torch_worker

from correct._protocol import Failure, Job, Transport, Worker, worker_info
from correct._protocol import Loader as _Base

__all__ = ["Loader", "Pipes"]

JOIN_S = 0.3  # shutdown waits this long in all for the workers to exit, then SIGKILLs them
WATCH_S = 0.05  # how often a worker's watchdog looks for its parent
_HEADER = struct.Struct("!Q")
MSG_FORK_ONLY = "this loader forks its workers; multiprocessing_context {name!r} is not supported"


def _write(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None  # EOF: the writer is gone (mid-message: a torn message)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int) -> Any:
    """One message, or None at EOF (also when the writer died in the middle of it)."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


def _closed(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(1)


class _Process:
    """One forked worker and the main process's ends of its pipes."""

    def __init__(self, owner: Pipes, job: Job, worker_id: int, seed: int, keep: list[int]) -> None:
        tasks_r, self.tasks = os.pipe()
        self.results, results_w = os.pipe()
        done_r, self.done = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                for fd in (*owner.closed_in_worker(self), *keep):
                    os.close(fd)
                owner.worker_loop(job, worker_id, seed, tasks_r, results_w, done_r)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        self.pid = pid
        self.status: int | None = None
        for fd in (tasks_r, results_w, done_r):
            os.close(fd)

    def poll(self) -> int | None:
        """Reap the worker if it exited; its wait status (None: still running)."""
        if self.status is None:
            with contextlib.suppress(ChildProcessError):
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid == self.pid:
                    self.status = status
        return self.status


class Pipes:
    """The transport: forked processes and pipes. Each step of a worker's life and of the
    shutdown is a method, so that a broken variant changes exactly one."""

    join_s = JOIN_S

    def __init__(self, job: Job, base_seed: int) -> None:
        self.workers: list[_Process] = []
        for w in range(job.num_workers):
            # Earlier workers' pipe ends are closed in each child: a worker must not keep
            # another's pipes open.
            keep = [fd for p in self.workers for fd in (p.tasks, p.results, p.done)]
            self.workers.append(_Process(self, job, w, base_seed + w, keep))

    # ---- in the worker (a forked child)

    def closed_in_worker(self, p: _Process) -> tuple[int, ...]:
        """The main process's ends of worker `p`'s pipes, closed in `p` right after the fork: a
        worker holding the read end of its own results would never see its parent's death as
        a broken pipe."""
        return (p.tasks, p.results, p.done)

    def worker_loop(
        self, job: Job, worker_id: int, seed: int, tasks: int, results: int, done: int
    ) -> None:
        """A worker's life."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.watch_parent()
        torch.manual_seed(seed)
        random.seed(seed)
        # torch has no setter; this is the variable its get_worker_info() reads in a process.
        torch_worker._worker_info = worker_info(job, worker_id, seed, "multiprocessing")
        where = f"in DataLoader worker process {worker_id}"
        worker = Worker(job, worker_id, where)
        while True:
            msg = _read(tasks)
            if msg is None or self.stop_fetching(done):
                return
            epoch, task, indices = msg
            result = worker.handle(epoch, indices)
            try:
                data = pickle.dumps((epoch, task, worker_id, result))
            except Exception as exc:
                data = pickle.dumps((epoch, task, worker_id, Failure(exc, where)))
            self.put_result(results, data)

    def put_result(self, results: int, data: bytes) -> None:
        """Send one result: written here, so a worker whose result does not fit the pipe blocks
        in this write (where its watchdog still ends it)."""
        _write(results, data)

    def watch_parent(self) -> None:
        """A watchdog thread ends the worker once its parent is gone, whatever it is doing."""
        threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()

    def stop_fetching(self, done: int) -> bool:
        """No fetch once shutdown began: the main process closed the done pipe."""
        return _closed(done)

    def send(self, worker: int, epoch: int, task: int, indices: Any) -> None:
        with contextlib.suppress(BrokenPipeError):  # a dead worker is reported by dead()
            _write(self.workers[worker].tasks, pickle.dumps((epoch, task, indices)))

    def recv(self, timeout_s: float) -> tuple[int, int, int, Any] | None:
        fds = [p.results for p in self.workers]
        ready, _, _ = select.select(fds, [], [], timeout_s)
        for fd in ready:
            msg = _read(fd)
            if msg is not None:
                return msg
        return None

    def dead(self) -> str | None:
        for p in self.workers:
            if p.poll() is not None:
                return f"DataLoader worker (pid {p.pid}) exited unexpectedly"
        return None

    # ---- shutdown, in the main process

    def close(self) -> None:
        for p in self.workers:
            os.close(p.done)  # the worker sees EOF on its done pipe: it fetches nothing more
            os.close(p.tasks)
        self.wait_exits()
        for p in self.workers:
            if p.poll() is None:
                self.kill(p)
            self.reap(p)
            os.close(p.results)

    def kill(self, p: _Process) -> None:
        """A worker still running after the bounded wait is killed."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)

    def wait_exits(self) -> None:
        """Give the workers `join_s` in all to exit, reading what they still write (a worker
        blocked on a full pipe must finish its write to see that it is done)."""
        deadline = time.monotonic() + self.join_s
        for p in self.workers:
            while p.poll() is None and time.monotonic() < deadline:
                if select.select([p.results], [], [], 0.01)[0] and not os.read(p.results, 1 << 20):
                    time.sleep(0.01)

    def reap(self, p: _Process) -> None:
        if p.status is None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, 0)


class Loader(_Base):
    """torch's DataLoader arguments; `num_workers` forked processes."""

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        context = kwargs.get("multiprocessing_context")
        name = getattr(context, "get_start_method", lambda: context)()
        if name not in (None, "fork"):
            raise NotImplementedError(MSG_FORK_ONLY.format(name=name))
        super().__init__(dataset, **kwargs)

    transport: type[Pipes] = Pipes

    def start(self, job: Job, base_seed: int) -> Transport:
        return self.transport(job, base_seed)
