"""The IO shell: worker processes, pipes and the pin-memory thread: the port the core runs on.

Owns every process, pipe, thread and clock of a multi-process iterator. Makes no protocol
decision: ``reference/loop.py`` asks the core (``reference/core.py``) what to do and calls this
iterator's port methods (``next_index``, ``send``, ``wait``, ``set_pin_done``, ``join_pin_thread``,
``set_workers_done``, ``reap``, ``shut_down``) to do it; each core step is one spec action and,
when tracing is on, one trace record, both made by ``loop.take``. Core exceptions become torch's
public ones at one boundary (``_public_error``).

Channels (why not torch's queues): one index pipe and one result pipe per worker. A pipe send is a
syscall in the calling thread (no feeder thread to flush or to lose a message at exit), results
carry small tensors as bytes and big ones as references to the worker's shared-memory slots
(``reference/wire.py``, ``reference/arena.py``: one anonymous memfd per worker, made here and
closed at shutdown) instead of one shared-memory segment and one fd per tensor, and a single
``poll`` on the result pipes *and* the workers' sentinels wakes the reader on a result or a
death alike: death is noticed in microseconds, not at torch's 5 s status check.

Shutdown IO (the order is the core's, docs/architecture.md): the pin thread is told under its
lock and woken by a wake-up pipe, because it reads the result pipes the workers are about to
close; the workers get one bounded join together (``_JOIN_S``), then whatever is left is
terminated (SIGKILL), so a stuck worker costs at most ``_JOIN_S`` + a few ms. After a failure the
join is not waited for: the error is raised at once, and the killed workers are reaped on the next
call, when the iterator goes, or before the next iterator starts.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import pickle
import queue
import signal
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
from loaderspec.reference import loop, wire
from loaderspec.reference.arena import MainArena
from loaderspec.reference.arena import available as arena_available
from loaderspec.reference.base import BaseIter, LoaderOptions
from loaderspec.reference.channels import Receiver
from loaderspec.reference.checkpoint import trace_checkpoint, user_digest, worker_starts
from loaderspec.reference.core import Failure, ProtocolConfig, ProtocolCore
from loaderspec.reference.messages import (
    TRACE_ORDER_WAIT_S,
    Arrived,
    Exited,
    IndexMessage,
    PinDied,
    RecvFailed,
    Result,
    Task,
    TimedOut,
    WaitEvent,
    WorkerChannels,
    WorkerConfig,
)
from loaderspec.reference.steps import Kind, ProtocolViolation
from loaderspec.reference.worker import worker_loop
from torch._utils import ExceptionWrapper
from torch.utils.data import _DatasetKind
from torch.utils.data._utils import pin_memory as torch_pin_memory

from loaderspec import tracewriter
from loaderspec.vocabulary import Action

# Graceful exit after the sentinel. An idle worker needs about a millisecond; one still busy
# after this is stuck or slow, and is terminated (torch waits 5 s for it). After a failure
# (worker death, timeout) the iterator is dead anyway: the others are terminated at once.
_JOIN_S = 0.1
_KILL_JOIN_S = 1.0  # a SIGKILLed process is gone in ms; only one stuck in the kernel takes longer
_PIN_POLL_S = 5.0  # main waiting on the pin thread's queue: re-check the thread is alive
_ERROR = Kind.ERROR  # read once a batch: an enum member off its class takes ~100 ns on 3.11

_FD_MESSAGE = (
    "Too many open files. Communication with the"
    " workers is no longer possible. Please increase the"
    " limit using `ulimit -n` in the shell or change the"
    " sharing strategy by calling"
    " `torch.multiprocessing.set_sharing_strategy('file_system')`"
    " at the beginning of your code"
)

_live_iters: weakref.WeakSet[MultiProcessingIter] = weakref.WeakSet()


@atexit.register
def _shutdown_all_at_exit() -> None:
    """Shut down iterators still alive at interpreter exit (persistent workers, say)."""
    for it in list(_live_iters):
        if getattr(it, "_owner_pid", None) != os.getpid():
            continue  # a forked process's copy: the owner's workers (see __del__)
        with contextlib.suppress(Exception):
            it.shut_down()
            it._reap_left(block=True)


def _log_moved(action: Action, event: Arrived) -> None:
    """The pin thread's record of a result it moved, with the result's origin (trace-check)."""
    r = event.result
    tracewriter.emit(action, worker=event.worker, task=r.idx, kind=r.kind.value, origin=r.origin)


def _release(p: Any) -> None:
    """Close a reaped worker's sentinel pipe, as ``Process.close()`` would, but keep the
    ``Process`` usable: torch's iterators never close theirs, and code written against torch
    reads ``it._workers`` after the epoch (``w.pid``, ``w.join()``, ``w.is_alive()``, which a
    closed ``Process`` refuses with "process object is closed"). Its exit code is already read,
    so nothing waits on that pipe again."""
    popen = getattr(p, "_popen", None)
    if popen is not None:
        popen.close()


def _brought(payload: Any) -> str | None:
    """A handed-out result that carries the user's state, ``(batch, state)``: that state's
    fingerprint for its MainProcessData record (an error result carries none: None)."""
    if type(payload) is tuple and len(payload) == 2:
        return user_digest(payload[1])
    return None


def _death_message(pids_and_codes: list[tuple[int, int | None]]) -> str:
    """torch's two texts in one: which pids, and how each ended (signal or exit code)."""
    pids = ", ".join(str(pid) for pid, _ in pids_and_codes)
    details = []
    for pid, code in pids_and_codes:
        if code is not None and code < 0:
            name = signal.strsignal(-code) or f"signal {-code}"
            details.append(f"DataLoader worker (pid {pid}) is killed by signal: {name}.")
        else:
            details.append(
                f"DataLoader worker (pid {pid}) exited unexpectedly with exit code {code}."
            )
    return f"DataLoader worker (pid(s) {pids}) exited unexpectedly: " + " ".join(details)


def _pin_loop(
    receiver: Receiver,
    data_queue: queue.Queue[WaitEvent],
    device_id: int,
    done_event: threading.Event,
    done_lock: threading.Lock,
    device: str | None,
    wakeup: Connection,
) -> None:
    """The pin-memory thread: read results, pin them with torch's own ``pin_memory``, pass on.

    Holds no reference to the iterator (so dropping the iterator shuts it down). Like torch's
    loop it looks at ``done_event`` before each get and each put, and does not put once it is
    set; the look and the step happen under ``done_lock``, which the main process holds while
    it takes MainSetPinDone and sets the event, so no get or put comes after that record.

    A result it cannot read kills it, as in torch (FaultPinDeath: the exception escapes torch's
    loop, pytorch F4); it leaves a ``PinDied`` event behind its last put, so the main process
    learns of the death when it has read everything before it, at once rather than at its
    ``_PIN_POLL_S`` look at the thread. Any other exception leaves one too, and is raised.
    """
    torch.set_num_threads(1)
    torch.multiprocessing._set_thread_name("pt_data_pin")
    if device_id >= 0:  # -1: no accelerator (a forced pin thread on CPU: pinning is identity)
        torch.accelerator.set_device_index(device_id)
    try:
        while not done_event.is_set():
            receiver.poll(None, extra=(wakeup,))
            while receiver.inbox:
                with done_lock:
                    if done_event.is_set():
                        break
                    event = receiver.inbox.popleft()
                    if type(event) is RecvFailed:
                        if tracewriter.ENABLED:
                            tracewriter.emit(Action.FAULT_PIN_DEATH, worker=event.worker)
                        data_queue.put(PinDied(event.worker, event.detail))
                        return
                    if type(event) is Arrived and tracewriter.ENABLED:
                        _log_moved(Action.PIN_GET_RESULT, event)
                if type(event) is Arrived:
                    event = Arrived(event.worker, _pinned(event.result, device, device_id))
                with done_lock:
                    if done_event.is_set():
                        break
                    if type(event) is Arrived and tracewriter.ENABLED:
                        _log_moved(Action.PIN_PUT_DATA, event)
                    data_queue.put(event)
    except BaseException as exc:  # a bug of ours: the main process must not wait for ever
        data_queue.put(PinDied(None, f"{type(exc).__name__}: {exc}"))
        raise
    if tracewriter.ENABLED:
        tracewriter.emit(Action.PIN_EXIT)


def _pinned(result: Result, device: str | None, device_id: int) -> Result:
    """``result`` with its batch in pinned memory (torch's ``pin_memory``), or its error."""
    if result.kind is not Kind.DATA or device is None:
        return result
    try:
        return result._replace(payload=torch_pin_memory.pin_memory(result.payload, device))
    except Exception:
        where = f"in pin memory thread for device {device_id}"
        return Result(result.idx, Kind.ERROR, ExceptionWrapper(where=where), result.origin)


class MultiProcessingIter(BaseIter):
    """torch's ``_MultiProcessingDataLoaderIter``: the port ``reference.loop`` runs the core on."""

    def __init__(self, loader: LoaderOptions) -> None:
        # Workers a failed iterator terminated are reaped before anything new starts, so no
        # zombie outlives the next iterator and each iterator's trace records stay together.
        for it in list(_live_iters):
            if it._unreaped:
                it._reap_left(block=True)
        super().__init__(loader)
        self._shutdown = True  # until every resource below exists; see shut_down
        assert loader.prefetch_factor is not None  # the loader sets it where num_workers > 0
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        # Began from a loaded state that skips positions or rotates shards (checkpoint.py).
        self.began_resumed = self._progress.arranged
        ctx = loader.multiprocessing_context or torch.multiprocessing
        method = ctx.get_start_method() if hasattr(ctx, "get_start_method") else "fork"
        # PR_SET_PDEATHSIG follows the forking *thread*, and under forkserver the fork server:
        # only a direct child forked by the main thread may rely on it (see reference/worker.py).
        use_pdeathsig = method in ("fork", "spawn") and (
            threading.current_thread() is threading.main_thread()
        )
        self._config = ProtocolConfig(
            num_workers=self._num_workers,
            prefetch_factor=self._prefetch_factor,
            in_order=self._in_order,
            persistent_workers=self._persistent_workers,
            iterable=self._dataset_kind == _DatasetKind.Iterable,
            pin_memory=self._pin_memory,
        )
        self._core = ProtocolCore(self._config)
        self._failure: str | None = None  # the error a failed iterator raises at every next()
        self._exit_codes: dict[int, int | None] = {}  # worker -> exit code, once it ended
        self._killed: set[int] = set()  # workers we SIGKILLed
        self._unreaped: list[int] = []  # killed workers not yet joined
        self._workers: list[Any] = []
        self._index_conns: list[Connection] = []
        result_conns: list[Connection] = []
        # One shared-memory arena per worker, for big batches (reference/arena.py); closed by
        # shut_down, whatever happens after this point.
        self._arenas: list[MainArena | None] = []
        self._workers_done_event = ctx.Event()
        # Tracing only: orders a worker's look at the done event with the main process's set of
        # it, so that their records' timestamps agree with what each saw (see set_workers_done).
        self._trace_order = ctx.Lock() if tracewriter.ENABLED else None
        worker_config = WorkerConfig(
            dataset_kind=self._dataset_kind,
            dataset=self._dataset,
            auto_collation=self._auto_collation,
            collate_fn=self._collate_fn,
            drop_last=self._drop_last,
            base_seed=self._base_seed,
            worker_init_fn=loader.worker_init_fn,
            num_workers=self._num_workers,
            parent_pid=os.getpid(),
            use_pdeathsig=use_pdeathsig,
            starts=worker_starts(
                self._progress.resumed_start,
                items_per_batch=loader._items_per_batch,
                num_workers=self._num_workers,
            ),
            shard_offset=self._progress.rotation,
            carry_state=loader._carries_state,
        )
        self._carries_state = worker_config.carry_state
        self._owner_pid = os.getpid()
        self._pin_memory_thread: threading.Thread | None = None
        self._wakeup: tuple[Connection, Connection] | None = None
        # The Config header's time: before any worker starts, so that it comes before every
        # record of this iterator's workers (worker_init_fn runs, and may fail, at once).
        t_created = time.monotonic_ns()
        try:
            for i in range(self._num_workers):
                arena = MainArena() if arena_available() else None
                self._arenas.append(arena)
                index_r, index_w = ctx.Pipe(duplex=False)
                try:
                    result_r, result_w = ctx.Pipe(duplex=False)
                except BaseException:
                    index_r.close()
                    index_w.close()
                    raise
                self._index_conns.append(index_w)
                result_conns.append(result_r)
                channels = WorkerChannels(
                    index_r,
                    result_w,
                    self._workers_done_event,
                    self._trace_order,
                    None if arena is None else arena.handle(),
                )
                w = ctx.Process(target=worker_loop, args=(worker_config, i, channels), daemon=True)
                try:
                    w.start()
                except (TypeError, AttributeError, pickle.PicklingError):
                    warnings.warn(
                        "Got pickle error when attempting to start a worker Process. "
                        "This might be because the worker Process arguments are not picklable. "
                        "Python 3.14+ changed the multiprocessing start method in non-Mac POSIX"
                        " platforms to 'forkserver', which requires the worker Process arguments"
                        " to be picklable. You can also try"
                        " multiprocessing.set_start_method('fork').",
                        stacklevel=3,
                    )
                    raise
                finally:
                    # Our copies of the worker's ends must go, or a dead worker's pipe never
                    # reads EOF and later workers (fork) inherit them.
                    index_r.close()
                    result_w.close()
                self._workers.append(w)
            self._receiver = Receiver(
                result_conns, [w.sentinel for w in self._workers], self._arenas
            )
            if self._pin_memory:
                self._start_pin_thread(ctx)
        except BaseException as exc:
            self._shutdown = False
            self._receiver = Receiver(result_conns, [w.sentinel for w in self._workers])
            self.shut_down()
            if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
                raise RuntimeError(_FD_MESSAGE) from None
            raise
        self._shutdown = False
        self._pids: list[int] = [w.pid for w in self._workers]
        _live_iters.add(self)
        if tracewriter.ENABLED:
            self._trace_config(t_created)
        self._reset(loader, first_iter=True)

    def _start_pin_thread(self, ctx: Any) -> None:
        self._pin_memory_thread_done_event = threading.Event()
        self._pin_done_lock = threading.Lock()
        self._data_queue: queue.Queue[WaitEvent] = queue.Queue()
        self._wakeup = ctx.Pipe(duplex=False)
        device_id = (
            torch.accelerator.current_device_index() if torch.accelerator.is_available() else -1
        )
        self._pin_memory_thread = threading.Thread(
            target=_pin_loop,
            args=(
                self._receiver,
                self._data_queue,
                device_id,
                self._pin_memory_thread_done_event,
                self._pin_done_lock,
                self._pin_memory_device,
                self._wakeup[0],
            ),
            daemon=True,
        )
        self._pin_memory_thread.start()

    def _trace_config(self, t: int) -> None:
        """The ``Config`` header (docs/contracts.md): the model constants this run follows,
        dated ``t``, when the iterator began to start its workers."""
        config = self._config
        tracewriter.emit_config(
            {
                "num_workers": config.num_workers,
                "prefetch_factor": config.prefetch_factor,
                "in_order": config.in_order,
                "persistent_workers": config.persistent_workers,
                "pin_memory": self._pin_memory_thread is not None,
                "iterable": config.iterable,
                "num_tasks": None
                if config.iterable
                else self._progress.tasks_left(len(self._index_sampler)),
                "timeout": float(self._timeout),
                "worker_pids": self._pids,
                # The state the first epoch began from (UserIter: a loaded one, or whole).
                "start": {
                    **trace_checkpoint(self._progress.start),
                    "total": 0 if config.iterable else len(self._index_sampler),
                },
            },
            t=t,
        )

    @property
    def resumable(self) -> bool:
        """Whether ``iter(loader)`` may start the next epoch on these (persistent) workers: not
        after a failure or a shutdown (docs/architecture.md, fail-stop)."""
        return not self._shutdown and self._core.failure is None

    # -------------------------------------------------------- the boundary ------------------
    def _public_error(self, exc: Exception) -> RuntimeError:
        """torch's public exception for what the core raised (the one place they are made)."""
        if isinstance(exc, loop.IteratorFailed):
            self._failure = self._failure_message(exc.failure)
        if self._failure is not None:  # fail-stop: every later next() raises the same error
            return RuntimeError(self._failure)
        return RuntimeError(f"DataLoader iterator: {exc}")

    def _failure_message(self, failure: Failure) -> str:
        if failure.action is Action.MAIN_TIMEOUT:
            return f"DataLoader timed out after {self._timeout} seconds"
        if failure.action is Action.MAIN_DETECT_PIN_FAILURE:  # torch's words, then why
            return (
                "Pin memory thread exited unexpectedly (DataLoader pin_memory=True): "
                + failure.detail
            )
        if failure.action is Action.FAULT_RECV_ERROR:
            (worker,) = failure.workers
            return f"DataLoader could not read a result of worker {worker}: {failure.detail}"
        return _death_message([(self._pids[w], self._exit_codes[w]) for w in failure.workers])

    # ------------------------------------------------------------- epoch --------------------
    def _reset(self, loader: LoaderOptions, first_iter: bool = False) -> None:
        ended = self._progress
        super()._reset(loader, first_iter)
        if not first_iter:  # the same workers: their datasets go on from where they ended
            self._progress.carry_from(ended)
        self._progress.core = self._core
        self._progress.carries = self._carries_state
        try:
            loop.start_epoch(self._core, self, resume=not first_iter)
        except (loop.IteratorFailed, ProtocolViolation) as exc:
            raise self._public_error(exc) from None

    def _next_data(self) -> Any:
        if self._unreaped:
            self._reap_left(block=False)
        try:
            delivery = loop.next_batch(self._core, self)
        except (loop.IteratorFailed, ProtocolViolation) as exc:
            raise self._public_error(exc) from None
        # the point of effect (traced, its record holds the user's state the batch brought)
        payload = loop.hand_out(
            self._core, delivery.payload, user=_brought if self._carries_state else None
        )
        if delivery.kind is _ERROR:
            payload.reraise()
        if self._carries_state:  # the user's state after this batch travelled with it
            payload, state = payload
            self._progress.user_state(delivery.worker, state)
        return payload

    # ------------------------------------------------------- port: dispatch -----------------
    def next_index(self) -> Any:
        return next(self._sampler_iter)  # StopIteration when the sampler ran dry

    def send(self, worker: int, message: IndexMessage) -> None:
        if tracewriter.ENABLED:
            loop.log_write(self._core)  # the point of effect: a put is logged before it happens
        if worker >= len(self._index_conns):
            return  # never started (construction failed)
        raw = message.to_wire() if type(message) is Task else message
        # A dead worker's pipe raises BrokenPipeError: its sentinel reports it on the next wait.
        try:  # noqa: SIM105  (not contextlib.suppress: no context manager object per task)
            wire.send_index(self._index_conns[worker], raw)
        except OSError:
            pass

    # -------------------------------------------------------- port: receive -----------------
    def wait(self) -> WaitEvent:
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        event = self._next_event(deadline)
        if type(event) is Exited:
            return self._on_exit(event.workers)
        if type(event) is TimedOut:
            # Deaths that raced the deadline go with it: the core reports them, not the timeout.
            return event._replace(ended=self._on_exit(()).workers)
        return event

    def _next_event(self, deadline: float | None) -> WaitEvent:
        if self._pin_memory_thread is not None:
            while True:
                pin_wait_s = _PIN_POLL_S if deadline is None else deadline - time.monotonic()
                try:
                    return self._data_queue.get(timeout=max(0.0, min(pin_wait_s, _PIN_POLL_S)))
                except queue.Empty:
                    if not self._pin_memory_thread.is_alive():  # gone without its PinDied
                        return PinDied(None, "it left no reason")
                    if deadline is not None and time.monotonic() >= deadline:
                        return TimedOut(self._timeout)
        receiver = self._receiver
        while not receiver.inbox:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            receiver.poll(wait_s)
            if not receiver.inbox and deadline is not None and time.monotonic() >= deadline:
                return TimedOut(self._timeout)
        return receiver.inbox.popleft()

    def _on_exit(self, workers: tuple[int, ...]) -> Exited:
        """Workers' processes ended: reap them now and keep their exit codes; whether that is a
        failure is the core's call. Others found ended too are reported together."""
        ended = set(workers)
        for w, p in enumerate(self._workers):
            if w not in self._exit_codes and (w in ended or not p.is_alive()):
                p.join(timeout=_KILL_JOIN_S)  # it has ended: this returns at once and reaps it
                self._exit_codes[w] = p.exitcode
                ended.add(w)
        return Exited(tuple(sorted(ended)))

    # ------------------------------------------------------- port: shutdown -----------------
    def set_pin_done(self, take_step: Callable[[], None]) -> None:
        if self._pin_memory_thread is None or self._wakeup is None:
            take_step()  # construction failed before the thread started
            return
        with self._pin_done_lock:  # see _pin_loop
            take_step()
            self._pin_memory_thread_done_event.set()
        self._wakeup[1].send_bytes(b"")  # the wake-up put: the thread waits on it

    def join_pin_thread(self) -> None:
        if self._pin_memory_thread is not None:
            self._pin_memory_thread.join()

    def set_workers_done(self, take_step: Callable[[], None]) -> None:
        """Traced, the step and the set happen under ``_trace_order``, as a worker's timestamp
        and its look at the event do: a fetch that saw the event clear is then logged before this
        record, a skip that saw it set after it. The wait is bounded: a worker killed inside that
        short section must not stop the shutdown."""
        lock = self._trace_order
        held = lock is not None and lock.acquire(timeout=TRACE_ORDER_WAIT_S)
        try:
            take_step()
            self._workers_done_event.set()
        finally:
            if held and lock is not None:
                lock.release()

    def reap(self, workers: list[int], *, grace: bool, block: bool) -> Iterator[tuple[int, bool]]:
        started = [w for w in workers if w < len(self._workers)]
        pending = {self._workers[w].sentinel: w for w in started if w not in self._killed}
        deadline = time.monotonic() + (_JOIN_S if grace else 0.0)
        while pending:
            left = max(0.0, deadline - time.monotonic())
            for sentinel in wait(list(pending), left):  # at least one pass: the already dead
                w = pending.pop(sentinel)
                self._workers[w].join()
                _release(self._workers[w])
                yield w, False
            if left == 0.0:
                break
        for w in pending.values():
            # SIGKILL, not torch's SIGTERM: torch's worker SIGTERM handler exits with status 0,
            # which would hide whether the worker was terminated or exited by itself, and a
            # dataset's own SIGTERM handler could keep a stuck worker alive.
            self._workers[w].kill()
            self._killed.add(w)
            self._unreaped.append(w)
        for w in list(self._unreaped):
            p = self._workers[w]
            p.join(timeout=_KILL_JOIN_S if block else 0)
            if p.exitcode is None:
                continue  # (block: only a process stuck in the kernel survives SIGKILL 1 s)
            self._unreaped.remove(w)
            # Our kill (not the worker's own exit after its sentinel, a race at the deadline)
            # ended it: known only now, so MainTerminateWorker is taken now.
            killed = p.exitcode == -signal.SIGKILL
            _release(p)
            yield w, killed
        if not self._unreaped:
            _live_iters.discard(self)

    def _reap_left(self, block: bool) -> None:
        """Reap workers a failed shutdown terminated (without blocking the error: the kernel
        needs tens of ms to tear a torch process down). ``block``: wait for them (bounded)."""
        loop.reap(self._core, self, grace=False, block=block)

    def shut_down(self) -> None:
        """Shut down (the core's steps, in the seeds' order); bounded; idempotent; leaves
        nothing behind."""
        if self._shutdown:
            return
        self._shutdown = True
        try:
            loop.shut_down(self._core, self)
        except BaseException:
            for w in self._core.unjoined():  # the protocol itself broke: no process may stay
                if w < len(self._workers) and w not in self._killed:
                    self._workers[w].kill()
                    self._killed.add(w)
                    self._unreaped.append(w)
            raise
        finally:
            self._receiver.close()
            for conn in self._index_conns:
                conn.close()
            for arena in self._arenas:
                if arena is not None:
                    arena.close()  # its memory goes with the last batch tensor over it
            if self._wakeup is not None:
                for conn in self._wakeup:
                    conn.close()

    def __del__(self) -> None:
        if sys.is_finalizing():
            return  # too late for IO; multiprocessing's own exit handler ends daemon workers
        if getattr(self, "_owner_pid", None) != os.getpid():
            # A forked copy (a later loader's worker, a user's fork) collecting this iterator:
            # its workers and pipes are the owner's; shutting them down here would end them.
            return
        if not getattr(self, "_shutdown", True):
            self.shut_down()
        if getattr(self, "_unreaped", None):
            self._reap_left(block=True)
