"""The worker process: torch's ``_worker_loop`` over pipes, plus a parent-death guarantee.

Owns what runs inside a worker: seeding (torch's, bit for bit), ``get_worker_info()`` (torch's own
``_worker_info``), ``worker_init_fn``, the fetch loop, exiting when the loader's process dies,
where glibc's allocator starts (``settle_malloc``) and how the kernel schedules it
(``yield_to_the_loader``).
Does the IO of a worker's steps and makes no protocol decision: the worker core
(``reference/worker_core.py``) answers every step, and ``reference.loop.take`` takes it and writes
its record. Knows nothing of the main process's protocol state. Spec actions taken here:
WorkerFetch, WorkerPut, WorkerAckResume, WorkerSkipIndex, WorkerExit, WorkerWatchdogExit, and the
fault FaultPutError (a batch that does not pickle).

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
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch
from loaderspec.reference import wire
from loaderspec.reference.arena import WorkerArena, small_batches_private
from loaderspec.reference.checkpoint import capture, start_fetcher, worker_rng
from loaderspec.reference.loop import take
from loaderspec.reference.messages import (
    RESUME,
    SENTINEL,
    TRACE_ORDER_WAIT_S,
    IndexMessage,
    Result,
    Task,
    WorkerChannels,
    WorkerConfig,
)
from loaderspec.reference.steps import Kind, Step
from loaderspec.reference.worker_core import WorkerCore
from torch._utils import ExceptionWrapper
from torch.utils.data import _DatasetKind
from torch.utils.data._utils import HAS_NUMPY, signal_handling
from torch.utils.data._utils import worker as torch_worker

from loaderspec import tracewriter
from loaderspec.vocabulary import Action

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# glibc's mallopt(3) parameters, and the values its own dynamic threshold ends at once the
# process has freed one block of DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit) or more.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_BYTES = 32 << 20
_TRIM_THRESHOLD_BYTES = 2 * _MMAP_THRESHOLD_BYTES
_WATCHDOG_POLL_S = 0.05  # only where no pidfd exists: well inside the 0.5 s orphan budget
# What every batch's steps use, as module names: an enum member read off its class takes
# 90-135 ns on Python 3.11, a module name next to nothing (as in reference/core.py).
_FETCH, _PUT, _DATA = Action.WORKER_FETCH, Action.WORKER_PUT, Kind.DATA


def _exit_orphaned(core: WorkerCore | None) -> None:
    """End this process: its parent is gone. ``core``: the worker's (None before it exists),
    read here and written only by the worker's main thread."""
    if tracewriter.ENABLED and core is not None:
        # The last record: no other thread of this worker logs after it (emit_last).
        tracewriter.emit_last(Action.WORKER_WATCHDOG_EXIT, epoch=core.epoch, worker=core.worker)
    os._exit(1)


def _watch_parent(parent_pid: int, core: WorkerCore) -> None:
    """Block until ``parent_pid`` is gone, then end this process (runs in a daemon thread)."""
    try:
        fd = os.pidfd_open(parent_pid)  # type: ignore[attr-defined,unused-ignore]  # Linux only
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable once the process has exited
        _exit_orphaned(core)
    while True:  # no pidfd (off Linux, or before 5.3): poll, the period bounds the delay
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            _exit_orphaned(core)
        except PermissionError:
            pass  # exists (pid reused by someone else is indistinguishable; accepted)
        time.sleep(_WATCHDOG_POLL_S)  # a poll period, not a wait for another thread


def arm_parent_death(parent_pid: int, use_pdeathsig: bool, core: WorkerCore) -> None:
    """Make sure this process ends within a few ms of ``parent_pid``'s death."""
    if use_pdeathsig and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
            # The parent may have died between fork and prctl: then nobody will signal us.
            if os.getppid() != parent_pid:
                _exit_orphaned(core)
            return
    threading.Thread(target=_watch_parent, args=(parent_pid, core), daemon=True).start()


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


def yield_to_the_loader() -> None:
    """Run this worker under Linux's ``SCHED_BATCH`` policy (from ``SCHED_OTHER`` only): it is
    never woken *into* a CPU ahead of the task running there, the loader's process among them.

    A worker sleeps until its next index comes and, woken, preempts whatever runs on the CPU it
    lands on. With more processes than CPUs that is often the loader's own process, the one
    that hands the batches out (measured side by side: docs/reference.md). Nothing else
    changes: the worker keeps its nice value and its share of the CPU; woken, it waits for the
    task on the CPU to sleep or use up its slice instead of preempting it. A policy the user
    chose (not SCHED_OTHER) is left alone, and ``worker_init_fn``, which runs after this, may
    set another. Off Linux, or where a sandbox forbids the call, nothing is done.
    """
    if not hasattr(os, "SCHED_BATCH"):
        return
    try:
        if os.sched_getscheduler(0) == os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        pass  # (EPERM under a seccomp profile that forbids it: the default policy stays)


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


def _send(core: WorkerCore, conn: Connection, result: Result, arena: WorkerArena | None) -> None:
    """WorkerPut: one result message, pickled first so that the put's record says what is sent:
    its task, its kind and, traced, the origin its payload got where it was fetched. Big tensors
    travel in the worker's ``arena`` slots (counted as sent when packed, ``transport.pack``). A
    result that does not pickle goes as its error instead (the core's ``put_error``)."""
    try:
        parts = wire.pack(result.to_wire(), arena)
    except _UNPICKLABLE:
        err = ExceptionWrapper(where=_where(core.worker))
        result = take(core, Action.FAULT_PUT_ERROR, result, err)
        try:
            parts = wire.pack(result.to_wire())
        except _UNPICKLABLE:
            # Even the error's type cannot be pickled (a local class): keep its text only.
            err.exc_type = RuntimeError
            parts = wire.pack(result.to_wire())
    take(core, _PUT, result, origin=result.origin)  # logged before it happens
    wire.write(conn, parts)


def _look_at_done(channels: WorkerChannels) -> tuple[int | None, bool]:
    """The time the message was taken (when tracing) and whether workers_done_event is set.
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


def _run_fetcher(fetcher: Any, task: Task, worker_id: int) -> tuple[Kind, Any]:
    """Run torch's fetcher on the task's index: what it gave, for the core's ``fetch`` to judge
    (a StopIteration comes wrapped, in case the dataset is map-style: then it is an error)."""
    try:
        return _DATA, fetcher.fetch(task.index)
    except StopIteration:  # (the wrapper reads the exception being handled: made in here)
        return Kind.EXHAUSTED, ExceptionWrapper(where=_where(worker_id))
    except Exception:
        return Kind.ERROR, ExceptionWrapper(where=_where(worker_id))


def _where(worker_id: int) -> str:
    return f"in DataLoader worker process {worker_id}"


class _WorkerIO:
    """The IO that goes with each step the worker core answers; decides nothing."""

    def __init__(
        self,
        core: WorkerCore,
        channels: WorkerChannels,
        arena: WorkerArena | None,
        new_fetcher: Callable[[], Any],
        fetcher: Any,
    ) -> None:
        self.core, self.conn, self.arena = core, channels.result, arena
        self.new_fetcher, self.fetcher = new_fetcher, fetcher
        self.carry_state = False  # results carry the user's state (reference/checkpoint.py)
        self.iterable = core.iterable
        self.dataset: Any = None

    def user_state(self, *, ended: bool) -> Any:
        """The user's state now (``checkpoint.capture``)."""
        return capture(self.dataset, self.fetcher, iterable=self.iterable, ended=ended)

    def epoch_edge_state(self, *, ended: bool) -> Any:
        """As an epoch begins (after ``iter(dataset)``) or the shard ends: the user's state and
        this process's RNGs (once per epoch: a persistent worker's next epoch draws on from
        them; each batch carries only the user's state)."""
        state = self.user_state(ended=ended) or (None, None, False)
        return (*state, worker_rng())

    def fetch(self, message: IndexMessage, step: Step, t_taken: int | None) -> None:
        assert isinstance(message, Task)
        kind, payload = step.kind, None
        if kind is None:  # the core left the outcome to the fetcher (no init error pending)
            tracewriter.fetch_began(t_taken)  # a hang or error record is this step's
            kind, payload = _run_fetcher(self.fetcher, message, self.core.worker)
            tracewriter.fetch_began(None)
            if self.carry_state and (kind is _DATA or (kind is Kind.EXHAUSTED and self.iterable)):
                # The user's state after this fetch travels with its result; a state_dict()
                # that raises is this task's error.
                try:
                    if kind is _DATA:
                        payload = (payload, self.user_state(ended=False))
                    else:  # the shard ran dry: what the next epoch of this worker starts from
                        payload = self.epoch_edge_state(ended=True)
                except Exception:
                    kind, payload = Kind.ERROR, ExceptionWrapper(where=_where(self.core.worker))
        result = take(self.core, _FETCH, message.idx, kind, payload, t=t_taken)
        del payload
        _send(self.core, self.conn, result, self.arena)

    def skip_index(self, message: IndexMessage, step: Step, t_taken: int | None) -> None:
        take(self.core, Action.WORKER_SKIP_INDEX, step.task)

    def ack_resume(self, message: IndexMessage, step: Step, t_taken: int | None) -> None:
        ack = take(self.core, Action.WORKER_ACK_RESUME)
        self.fetcher = self.new_fetcher()  # the new epoch's shard, from its start
        if self.carry_state:
            # The ack carries the user's state right after iter(dataset) (torchdata's startup
            # ack does too): a state taken before this worker's first batch of the epoch.
            with contextlib.suppress(Exception):  # (a state_dict() that raises: none)
                ack = ack._replace(payload=self.epoch_edge_state(ended=False))
        wire.send(self.conn, ack.to_wire())

    def exit(self, message: IndexMessage, step: Step, t_taken: int | None) -> None:
        take(self.core, Action.WORKER_EXIT)


# The IO of every step the worker core's next_action() may answer.
_PERFORM: dict[Action, Callable[[_WorkerIO, IndexMessage, Step, int | None], None]] = {
    Action.WORKER_FETCH: _WorkerIO.fetch,
    Action.WORKER_SKIP_INDEX: _WorkerIO.skip_index,
    Action.WORKER_ACK_RESUME: _WorkerIO.ack_resume,
    Action.WORKER_EXIT: _WorkerIO.exit,
}


def _index_message(raw: Any) -> IndexMessage:
    """An index-queue message as it came off the wire (a task travels as a plain tuple)."""
    return raw if raw is SENTINEL or raw == RESUME else Task(*raw)


def worker_loop(config: WorkerConfig, worker_id: int, channels: WorkerChannels) -> None:
    """The worker's life: seed, init, then take the steps its core decides until the sentinel.
    Only IO here: reading, fetching, writing; the core (``reference/worker_core.py``) decides."""
    tracewriter.configure_from_env()  # before the watchdog may need it
    iterable = config.dataset_kind == _DatasetKind.Iterable
    core = WorkerCore(worker_id, iterable=iterable, traced=tracewriter.ENABLED)
    arm_parent_death(config.parent_pid, config.use_pdeathsig, core)
    settle_malloc()
    index_conn, result_conn = channels.index, channels.result
    arena = None if channels.arena is None else WorkerArena(channels.arena)
    try:
        if arena is not None:
            arena.install()  # default_collate's shared-memory batches go into its slots
        signal_handling._set_worker_signal_handlers()
        torch.multiprocessing._set_thread_name("pt_data_worker")
        torch.set_num_threads(1)
        yield_to_the_loader()  # before worker_init_fn, which may choose otherwise
        # A resumed epoch's round-robin starts at the worker whose batch comes next: this slot
        # runs as worker (slot + shard_offset) % num_workers (reference/checkpoint.py).
        shard = (worker_id + config.shard_offset) % config.num_workers
        seed = _seed(config.base_seed, shard)
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=shard, num_workers=config.num_workers, seed=seed, dataset=config.dataset
        )
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

        fetcher = None
        try:
            if config.worker_init_fn is not None:
                config.worker_init_fn(shard)  # the id get_worker_info() gives, as in torch
            start = None if config.starts is None else config.starts[shard]
            # A resumed worker: the user's states loaded around iter(dataset), or a fast-forward.
            fetcher = start_fetcher(new_fetcher, config.dataset, start, iterable=iterable)
        except Exception:
            core.init_failed(ExceptionWrapper(where=_where(worker_id)))

        io = _WorkerIO(core, channels, arena, new_fetcher, fetcher)
        io.carry_state, io.dataset = config.carry_state, config.dataset
        indexes = wire.index_reader(index_conn)
        while not core.exited:
            try:
                message = _index_message(indexes.recv())
            except (EOFError, OSError):
                break  # the loader closed our queue: nothing more will come
            # A fetch happens now, when the index is taken (the spec takes it and fetches in one
            # step, enabled only before workers_done_event); it is logged after the fetch, which
            # decides its kind (docs/contracts.md).
            t_taken, done = _look_at_done(channels)
            step = core.next_action(message, done)
            _PERFORM[step.action](io, message, step, t_taken)
            del message
    except KeyboardInterrupt:
        pass  # the main process handles ^C; a worker ends quietly
    finally:
        for conn in (result_conn, index_conn):  # each closed, whatever the other did
            with contextlib.suppress(OSError):
                conn.close()
