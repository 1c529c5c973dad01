"""The worker process: torch's ``_worker_loop`` over pipes, plus a parent-death guarantee.

Owns what runs inside a worker: seeding (torch's, bit for bit), ``get_worker_info()`` (torch's own
``_worker_info``), ``worker_init_fn``, the fetch loop, exiting when the loader's process dies, and
where glibc's allocator starts (``settle_malloc``).
Knows the messages (``reference/messages.py``) and nothing of the main process's protocol state.
Spec actions taken here: WorkerFetch, WorkerPut, WorkerAckResume, WorkerSkipIndex, WorkerExit,
WorkerWatchdogExit, and the fault FaultPutError (a batch that does not pickle).

Parent death (``NoOrphanWorkers``): torch checks ``os.getppid()`` only between tasks, so a worker
busy in ``__getitem__`` or blocked on a full queue outlives its parent. Here, on Linux,
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes the kernel kill the worker whatever it is doing. That
signal follows the *thread* that forked us and, under forkserver, the fork server rather than the
loader; in those cases (and off Linux) a watchdog thread waits on a pidfd of the loader's process
(or polls it) and ends the worker with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import random
import select
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import _DatasetKind
from torch.utils.data._utils import HAS_NUMPY, signal_handling
from torch.utils.data._utils import worker as torch_worker

from loaderspec import tracewriter
from loaderspec.vocabulary import Action
from reference import wire
from reference.arena import WorkerArena, small_batches_private
from reference.core import Kind
from reference.messages import (
    RESUME,
    SENTINEL,
    TRACE_ORDER_WAIT_S,
    Result,
    Task,
    WorkerChannels,
    WorkerConfig,
)

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# glibc's mallopt(3) parameters, and the values its own dynamic threshold ends at once the
# process has freed one block of DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit) or more.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 32 << 20
_TRIM_THRESHOLD_BYTES = 2 * _MMAP_THRESHOLD_BYTES
_WATCHDOG_POLL_S = 0.05  # only where no pidfd exists: well inside the 0.5 s orphan budget

# Who this process is, for the watchdog's record (set by worker_loop; the epoch as it advances).
_me: dict[str, int | None] = {"worker": None, "epoch": 0}


def _exit_orphaned() -> None:
    if tracewriter.ENABLED:  # the last record: no other thread of this worker logs after it
        tracewriter.emit_last(Action.WORKER_WATCHDOG_EXIT, epoch=_me["epoch"], worker=_me["worker"])
    os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    """Block until ``parent_pid`` is gone, then end this process (runs in a daemon thread)."""
    try:
        fd = os.pidfd_open(parent_pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has exited
        _exit_orphaned()
    while True:
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            _exit_orphaned()
        except PermissionError:
            pass  # exists (pid reused by someone else is indistinguishable; accepted)
        threading.Event().wait(_WATCHDOG_POLL_S)


def arm_parent_death(parent_pid: int, use_pdeathsig: bool) -> None:
    """Make sure this process ends within a few ms of ``parent_pid``'s death."""
    if use_pdeathsig and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            # The parent may have died between fork and prctl: then nobody will signal us.
            if os.getppid() != parent_pid:
                _exit_orphaned()
            return
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def settle_malloc() -> None:
    """Start glibc's allocator where a long-running process ends up: big blocks from the heap
    and a freed batch's items kept for the next one, instead of fresh pages every batch.

    glibc serves a block over its mmap threshold (128 KiB at first) with a fresh mapping, and
    raises the threshold to a block's size when it frees one; it then gives the heap's top back
    to the kernel whenever more than twice that is free. A worker whose items are 1 MiB frees
    four per batch, so the heap top is trimmed after every batch and the next one page-faults
    4 MiB back in: 2.9 ms of CPU per 1 MiB-item batch instead of 0.6 ms (measured; which of the
    two a worker gets depended on what its parent had freed before the fork). Setting both
    thresholds to where glibc's own heuristic stops makes every worker start there. A user's
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` is left to rule; off glibc (no
    ``mallopt``), nothing is done.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)


def _seed(base_seed: int, worker_id: int) -> int:
    """torch's worker seeding, bit for bit (``_worker_loop``)."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    if HAS_NUMPY:
        import numpy as np

        np.random.seed(torch_worker._generate_state(base_seed, worker_id))
    return seed


_UNPICKLABLE = (TypeError, AttributeError, pickle.PicklingError)


def _send(
    conn: Connection, result: Result, worker_id: int, epoch: int, arena: WorkerArena | None
) -> None:
    """WorkerPut: one result message, pickled first so that the put's record says what is sent:
    its task, its kind and, traced, the origin its payload got where it was fetched. Big tensors
    travel in the worker's ``arena`` slots (counted as sent when packed, ``transport.pack``).

    A batch that cannot be pickled (FaultPutError) is sent as its error instead, so the main
    process raises it in turn rather than wait for a batch that never comes (torch's feeder
    thread dies on it and the loader hangs, pytorch#142884).
    """
    try:
        parts = wire.pack(result.to_wire(), arena)
    except _UNPICKLABLE:
        if tracewriter.ENABLED and result.kind is Kind.DATA:  # the spec's fault is a batch's
            tracewriter.emit(Action.FAULT_PUT_ERROR, epoch=epoch, worker=worker_id, task=result.idx)
        err = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        result = Result(result.idx, Kind.ERROR, err, result.origin)
        try:
            parts = wire.pack(result.to_wire())
        except _UNPICKLABLE:
            # Even the error's type cannot be pickled (a local class): keep its text only.
            err.exc_type = RuntimeError
            parts = wire.pack(result.to_wire())
    if tracewriter.ENABLED:  # a put is logged before it happens
        fields = {"epoch": epoch, "worker": worker_id, "task": result.idx}
        tracewriter.emit(Action.WORKER_PUT, kind=result.kind.value, origin=result.origin, **fields)
    wire.write(conn, parts)


def _look_at_done(channels: WorkerChannels) -> tuple[int | None, bool]:
    """The time the index was taken (when tracing) and whether workers_done_event is set.
    Traced, both under the shell's ``trace_order`` lock, so that the timestamp and the look are
    ordered with the main process's MainSetWorkersDone record and set (shell.set_workers_done)."""
    done_event, trace_order = channels.done_event, channels.trace_order
    if not tracewriter.ENABLED:
        return None, done_event.is_set()
    held = trace_order is not None and trace_order.acquire(timeout=TRACE_ORDER_WAIT_S)
    try:
        return time.monotonic_ns(), done_event.is_set()
    finally:
        if held:
            trace_order.release()


def _fetch(fetcher: Any, task: Task, worker_id: int, iterable: bool, epoch: int) -> Result:
    """WorkerFetch: run torch's fetcher on the task's index; an exception is the result.
    Traced, the result's origin (the payload-origin ghost) is bound here, where it is made."""
    origin = (worker_id, task.idx, epoch) if tracewriter.ENABLED else None
    try:
        return Result(task.idx, Kind.DATA, fetcher.fetch(task.index), origin)
    except StopIteration:
        if iterable:
            return Result(task.idx, Kind.EXHAUSTED, None, origin)
        where = f"in DataLoader worker process {worker_id}"
        return Result(task.idx, Kind.ERROR, ExceptionWrapper(where=where), origin)
    except Exception:
        where = f"in DataLoader worker process {worker_id}"
        return Result(task.idx, Kind.ERROR, ExceptionWrapper(where=where), origin)


def worker_loop(config: WorkerConfig, worker_id: int, channels: WorkerChannels) -> None:
    """The worker's life: seed, init, then fetch tasks until the None sentinel."""
    _me["worker"] = worker_id
    tracewriter.configure_from_env()  # before the watchdog may need it
    arm_parent_death(config.parent_pid, config.use_pdeathsig)
    settle_malloc()
    index_conn, result_conn = channels.index, channels.result
    arena = None if channels.arena is None else WorkerArena(channels.arena)
    try:
        if arena is not None:
            arena.install()  # default_collate's shared-memory batches go into its slots
        signal_handling._set_worker_signal_handlers()
        torch.multiprocessing._set_thread_name("pt_data_worker")
        torch.set_num_threads(1)
        seed = _seed(config.base_seed, worker_id)
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=worker_id, num_workers=config.num_workers, seed=seed, dataset=config.dataset
        )
        iterable = config.dataset_kind == _DatasetKind.Iterable

        collate_fn = config.collate_fn
        if arena is not None:  # big batches go to its slots; small ones stay private
            collate_fn = small_batches_private(collate_fn)

        def new_fetcher() -> Any:
            return _DatasetKind.create_fetcher(
                config.dataset_kind,
                config.dataset,
                config.auto_collation,
                collate_fn,
                config.drop_last,
            )

        # As torch: an error in worker_init_fn or the fetcher's creation is the result of the
        # worker's first task (in its turn), not a crash.
        init_exception: ExceptionWrapper | None = None
        fetcher = None
        try:
            if config.worker_init_fn is not None:
                config.worker_init_fn(worker_id)
            fetcher = new_fetcher()
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")

        epoch = 0
        iteration_end = False
        while True:
            try:
                r = wire.recv(index_conn)
            except (EOFError, OSError):
                break  # the loader closed our queue: nothing more will come
            if r == RESUME:
                epoch += 1
                _me["epoch"] = epoch
                iteration_end = False
                if tracewriter.ENABLED:
                    tracewriter.emit(
                        Action.WORKER_ACK_RESUME,
                        epoch=epoch,
                        worker=worker_id,
                        state={"iteration_end": iteration_end},
                    )
                origin = (worker_id, -1, epoch) if tracewriter.ENABLED else None
                wire.send(result_conn, Result(-1, Kind.RESUME, None, origin).to_wire())
                fetcher = new_fetcher()
                continue
            if r is SENTINEL:
                if tracewriter.ENABLED:
                    tracewriter.emit(Action.WORKER_EXIT, epoch=epoch, worker=worker_id)
                break
            # WorkerFetch happens now, when the index is taken (the spec takes it and fetches in
            # one step, enabled only before workers_done_event); it is logged after the fetch,
            # which decides its kind (docs/contracts.md).
            task = Task(*r)
            t_fetch, done = _look_at_done(channels)
            if done or iteration_end:
                if tracewriter.ENABLED:
                    tracewriter.emit(
                        Action.WORKER_SKIP_INDEX,
                        epoch=epoch,
                        worker=worker_id,
                        task=task.idx,
                        state={"iteration_end": iteration_end},
                    )
                continue
            if init_exception is not None:
                result = Result(task.idx, Kind.ERROR, init_exception)
                init_exception = None
            else:
                tracewriter.fetch_began(t_fetch)  # a hang or error record is this fetch's step
                result = _fetch(fetcher, task, worker_id, iterable, epoch)
                tracewriter.fetch_began(None)
                iteration_end = result.kind is Kind.EXHAUSTED
            if tracewriter.ENABLED and result.origin is None:  # the init error's
                result = result._replace(origin=(worker_id, task.idx, epoch))
            if tracewriter.ENABLED:
                fields = {"epoch": epoch, "worker": worker_id, "task": task.idx}
                kind, state = result.kind.value, {"iteration_end": iteration_end}
                tracewriter.emit(Action.WORKER_FETCH, t=t_fetch, kind=kind, state=state, **fields)
            _send(result_conn, result, worker_id, epoch, arena)
            del result, r, task
    except KeyboardInterrupt:
        pass  # the main process handles ^C; a worker ends quietly
    finally:
        with contextlib.suppress(OSError):
            result_conn.close()
            index_conn.close()
