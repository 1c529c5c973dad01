"""The IO shell: worker processes, pipes, the pin-memory thread, driven by ``ProtocolCore``.

Owns every process, pipe, thread and clock of a multi-process iterator. Makes no protocol
decision: it asks the core (``reference/core.py``) what to do, does it, and tells the core what
happened; each core call is one spec action and, when tracing is on, one trace record.

Channels (why not torch's queues): one index pipe and one result pipe per worker. A pipe send is a
syscall in the calling thread (no feeder thread to flush or to lose a message at exit), results
carry tensors as bytes (``reference/wire.py``) instead of one shared-memory segment and one fd per
tensor, and a single ``multiprocessing.connection.wait`` on the result pipes *and* the workers'
sentinels wakes the reader on a result or a death alike: death is noticed in microseconds, not at
torch's 5 s status check.

Shutdown order (the seeds' NOTE, docs/architecture.md): pin thread first (done event, wake-up put,
join), because it reads the result pipes the workers are about to close; then
``workers_done_event``, a None sentinel per worker, one bounded join for all of them together, and
terminate (SIGKILL) whatever is left, so a stuck worker costs at most ``_JOIN_S`` + a few ms. After
a failure (fail-stop) the join is not waited for: the error is raised at once, and the killed
workers are reaped on the next call, when the iterator goes, or before the next iterator starts.
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
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import _DatasetKind
from torch.utils.data._utils import pin_memory as torch_pin_memory

from loaderspec.vocabulary import Action
from reference import tracing, wire
from reference.base import BaseIter
from reference.channels import EXIT, MSG, RECV_ERROR, Receiver
from reference.core import Kind, ProtocolCore
from reference.worker import RESUME, worker_loop

if TYPE_CHECKING:
    from reference.loader import DataLoader

# Graceful exit after the sentinel. An idle worker needs about a millisecond; one still busy
# after this is stuck or slow, and is terminated (torch waits 5 s for it). After a failure
# (worker death, timeout) the iterator is dead anyway: the others are terminated at once.
_JOIN_S = 0.1
_KILL_JOIN_S = 1.0  # a SIGKILLed process is gone in ms; only one stuck in the kernel takes longer
_PIN_POLL_S = 5.0  # main waiting on the pin thread's queue: re-check the thread is alive

_FD_MESSAGE = (
    "Too many open files. Communication with the"
    " workers is no longer possible. Please increase the"
    " limit using `ulimit -n` in the shell or change the"
    " sharing strategy by calling"
    " `torch.multiprocessing.set_sharing_strategy('file_system')`"
    " at the beginning of your code"
)

# What the pin thread leaves on its queue when it dies: (PIN_DIED, worker or None, detail).
PIN_DIED = "pin_died"

_live_iters: weakref.WeakSet[MultiProcessingIter] = weakref.WeakSet()


@atexit.register
def _shutdown_all_at_exit() -> None:
    """Shut down iterators still alive at interpreter exit (persistent workers, say)."""
    for it in list(_live_iters):
        with contextlib.suppress(Exception):
            it._shutdown_workers()
            it._reap_terminated(block=True)


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
    data_queue: queue.Queue[tuple[Any, ...]],
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
    it records and sets the event (MainSetPinDone), so no get or put comes after that record.
    A result it cannot read kills it, as in torch (FaultPinDeath); it leaves a ``PIN_DIED``
    marker behind its last put so the main process learns of it at once, not at a status check.
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
                    if event[0] == RECV_ERROR:
                        if tracing.ENABLED:
                            tracing.emit("FaultPinDeath", "Fault", worker=event[1])
                        raise _PinDeath(event[1], event[2])
                    if event[0] == MSG and tracing.ENABLED:
                        tracing.emit(
                            "PinGetResult",
                            "Pin",
                            worker=event[1],
                            task=event[2][0],
                            kind=event[2][1],
                        )
                if event[0] == MSG:
                    idx, kind, payload = event[2]
                    if kind == Kind.DATA.value and device is not None:
                        try:
                            payload = torch_pin_memory.pin_memory(payload, device)
                        except Exception:
                            payload = ExceptionWrapper(
                                where=f"in pin memory thread for device {device_id}"
                            )
                            kind = Kind.ERROR.value
                    event = (MSG, event[1], idx, kind, payload)
                with done_lock:
                    if done_event.is_set():
                        break
                    if event[0] == MSG and tracing.ENABLED:
                        tracing.emit("PinPutData", "Pin", worker=event[1], task=idx, kind=kind)
                    data_queue.put(event)
    except _PinDeath as death:  # a result it could not read: the main process raises it
        data_queue.put((PIN_DIED, death.worker, death.detail))
        return
    except BaseException as exc:  # anything else: say so where the main process reads, too
        data_queue.put((PIN_DIED, None, f"{type(exc).__name__}: {exc}"))
        raise
    if tracing.ENABLED:
        tracing.emit("PinExit", "Pin")


class _PinDeath(Exception):
    """The pin thread read a result it could not rebuild; it ends (FaultPinDeath)."""

    def __init__(self, worker: int, detail: str) -> None:
        super().__init__(detail)
        self.worker = worker
        self.detail = detail


class MultiProcessingIter(BaseIter):
    """torch's ``_MultiProcessingDataLoaderIter``, with the protocol in ``ProtocolCore``."""

    def __init__(self, loader: DataLoader) -> None:
        # Workers a failed iterator terminated are reaped before anything new starts, so no
        # zombie outlives the next iterator and each iterator's trace records stay together.
        for it in list(_live_iters):
            if it._unreaped:
                it._reap_terminated(block=True)
        super().__init__(loader)
        self._shutdown = True  # until every resource below exists; see _shutdown_workers
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        ctx = loader.multiprocessing_context or torch.multiprocessing
        method = ctx.get_start_method() if hasattr(ctx, "get_start_method") else "fork"
        # PR_SET_PDEATHSIG follows the forking *thread*, and under forkserver the fork server:
        # only a direct child forked by the main thread may rely on it (see reference/worker.py).
        use_pdeathsig = method in ("fork", "spawn") and (
            threading.current_thread() is threading.main_thread()
        )
        self._core = ProtocolCore(
            self._num_workers,
            self._prefetch_factor,
            in_order=self._in_order,
            persistent_workers=self._persistent_workers,
            iterable=self._dataset_kind == _DatasetKind.Iterable,
            pin_memory=self._pin_memory,
        )
        self._failure: str | None = None
        self._dead: dict[int, int | None] = {}  # worker -> exit code, once its process ended
        self._unreaped: list[int] = []  # terminated workers not yet joined
        self._workers: list[Any] = []
        self._index_conns: list[Connection] = []
        result_conns: list[Connection] = []
        self._workers_done_event = ctx.Event()
        # Tracing only: orders a worker's look at the done event with the main process's set of
        # it, so that their records' timestamps agree with what each saw (see _set_workers_done).
        self._trace_order = ctx.Lock() if tracing.ENABLED else None
        self._pin_memory_thread: threading.Thread | None = None
        self._wakeup: tuple[Connection, Connection] | None = None
        try:
            for i in range(self._num_workers):
                index_r, index_w = ctx.Pipe(duplex=False)
                try:
                    result_r, result_w = ctx.Pipe(duplex=False)
                except BaseException:
                    index_r.close()
                    index_w.close()
                    raise
                self._index_conns.append(index_w)
                result_conns.append(result_r)
                w = ctx.Process(
                    target=worker_loop,
                    args=(
                        self._dataset_kind,
                        self._dataset,
                        index_r,
                        result_w,
                        self._workers_done_event,
                        self._auto_collation,
                        self._collate_fn,
                        self._drop_last,
                        self._base_seed,
                        loader.worker_init_fn,
                        i,
                        self._num_workers,
                        os.getpid(),
                        use_pdeathsig,
                        self._trace_order,
                    ),
                    daemon=True,
                )
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
            self._receiver = Receiver(result_conns, [w.sentinel for w in self._workers])
            if self._pin_memory:
                self._pin_memory_thread_done_event = threading.Event()
                self._pin_done_lock = threading.Lock()
                self._data_queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
                self._wakeup = ctx.Pipe(duplex=False)
                self._pin_memory_thread = threading.Thread(
                    target=_pin_loop,
                    args=(
                        self._receiver,
                        self._data_queue,
                        torch.accelerator.current_device_index()
                        if torch.accelerator.is_available()
                        else -1,
                        self._pin_memory_thread_done_event,
                        self._pin_done_lock,
                        self._pin_memory_device,
                        self._wakeup[0],
                    ),
                    daemon=True,
                )
                self._pin_memory_thread.start()
        except BaseException as exc:
            self._shutdown = False
            self._receiver = Receiver(result_conns, [w.sentinel for w in self._workers])
            self._shutdown_workers()
            if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
                raise RuntimeError(_FD_MESSAGE) from None
            raise
        self._shutdown = False
        _live_iters.add(self)
        if tracing.ENABLED:
            self._trace_config(loader)
        self._reset(loader, first_iter=True)

    # ----------------------------------------------------------- tracing --------------------
    def _trace(self, action: Action, **fields: Any) -> None:
        tracing.emit(
            action.value, "Main", epoch=self._core.epoch, state=self._core.snapshot(), **fields
        )

    def _trace_config(self, loader: DataLoader) -> None:
        """The ``Config`` header (docs/contracts.md): the model constants this run follows."""
        iterable = self._dataset_kind == _DatasetKind.Iterable
        tracing.emit(
            "Config",
            "Main",
            epoch=0,
            state={},
            config={
                "num_workers": self._num_workers,
                "prefetch_factor": self._prefetch_factor,
                "in_order": self._in_order,
                "persistent_workers": self._persistent_workers,
                "pin_memory": self._pin_memory_thread is not None,
                "iterable": iterable,
                "num_tasks": None if iterable else len(self._index_sampler),
                "timeout": float(self._timeout),
                "worker_pids": [w.pid for w in self._workers],
            },
        )

    # ------------------------------------------------------------- epoch --------------------
    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        core = self._core
        if not first_iter:
            if core.phase.value == "running":  # a break mid-epoch: persistent workers stay
                core.drop_iterator()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_DROP_ITERATOR)
            workers = core.resume_iteration()
            if tracing.ENABLED:  # the puts of the resume messages follow
                self._trace(Action.MAIN_RESUME_ITERATION)
            for w in workers:
                self._send(w, RESUME)
            # Each worker answers a resume after everything it was sent before: once every
            # worker has answered, no result of the old epoch can still arrive.
            while core.phase.value == "resuming":
                event = self._get_event()
                core.drain_resume(event[1], Kind(event[3]))  # old results are dropped
                if tracing.ENABLED:
                    self._trace(Action.MAIN_DRAIN_RESUME, worker=event[1], kind=event[3])
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    # ---------------------------------------------------------- dispatch --------------------
    def _send(self, worker: int, message: Any) -> None:
        if worker >= len(self._index_conns):
            return  # never started (construction failed)
        # A dead worker's pipe raises BrokenPipeError: its sentinel reports it on the next wait.
        with contextlib.suppress(OSError):
            wire.send(self._index_conns[worker], message)

    def _try_put_index(self) -> bool:
        """MainTryPutIndex if a worker may take a task and the sampler has one; True if sent."""
        worker = self._core.next_worker()
        if worker is None:
            return False
        try:
            index = self._next_index()
        except StopIteration:
            return False
        idx = self._core.try_put_index(worker)
        if tracing.ENABLED:  # a put is logged before it happens
            self._trace(Action.MAIN_TRY_PUT_INDEX, worker=worker, task=idx)
        self._send(worker, (idx, index))
        return True

    # ----------------------------------------------------------- receive --------------------
    def _get_event(self) -> tuple[Any, ...]:
        """The next (MSG, worker, idx, kind, payload); raises on timeout, a worker's death, a
        result that cannot be read, or the pin thread's death."""
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            self._check_dead()
            event = self._next_raw_event(deadline)
            if event is None:
                self._core.timeout()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_TIMEOUT)
                self._fail(f"DataLoader timed out after {self._timeout} seconds")
            if event[0] == EXIT:
                self._on_exit(event[1])
                continue
            if event[0] == RECV_ERROR:
                self._recv_failed(event[1], event[2])
            if event[0] == PIN_DIED:
                self._pin_died(event[2])
            return event

    def _recv_failed(self, worker: int, detail: str) -> None:
        """FaultRecvError: a result of ``worker`` arrived but could not be read. It is lost, so
        the iterator cannot go on (a later next() would wait for it for ever): fail-stop."""
        self._core.recv_error()
        if tracing.ENABLED:  # logged by the process that saw it, with the main's post-state
            tracing.emit(
                Action.FAULT_RECV_ERROR.value,
                "Fault",
                epoch=self._core.epoch,
                worker=worker,
                state=self._core.snapshot(),
            )
        self._fail(f"DataLoader could not read a result of worker {worker}: {detail}")

    def _pin_died(self, detail: str) -> None:
        """MainDetectPinFailure: the pin thread is gone and nothing more will come: fail-stop."""
        self._core.detect_pin_failure()
        if tracing.ENABLED:
            self._trace(Action.MAIN_DETECT_PIN_FAILURE)
        self._fail(f"Pin memory thread exited unexpectedly (DataLoader pin_memory=True): {detail}")

    def _next_raw_event(self, deadline: float | None) -> tuple[Any, ...] | None:
        if self._pin_memory_thread is not None:
            while True:
                wait_s = _PIN_POLL_S if deadline is None else deadline - time.monotonic()
                try:
                    return self._data_queue.get(timeout=max(0.0, min(wait_s, _PIN_POLL_S)))
                except queue.Empty:
                    if not self._pin_memory_thread.is_alive():  # died leaving no marker
                        self._pin_died("no reason given")
                    if deadline is not None and time.monotonic() >= deadline:
                        return None
        receiver = self._receiver
        while not receiver.inbox:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            receiver.poll(wait_s)
            if not receiver.inbox and deadline is not None and time.monotonic() >= deadline:
                return None
        event = receiver.inbox.popleft()
        if event[0] == MSG:
            return (MSG, event[1], *event[2])
        return event

    def _on_exit(self, worker: int) -> None:
        """A worker process ended. Reap it now; whether that is a failure is the core's call."""
        p = self._workers[worker]
        p.join(timeout=_KILL_JOIN_S)  # it has ended: this returns at once and reaps it
        self._dead[worker] = p.exitcode
        for w, other in enumerate(self._workers):  # deaths seen together are reported together
            if w not in self._dead and not other.is_alive():
                self._dead[w] = other.exitcode

    def _check_dead(self) -> None:
        """Fail-stop if a worker the iterator depends on has died (now or since it was retired)."""
        core = self._core
        dead = [w for w in sorted(self._dead) if core.depends_on(w)]
        if not dead:
            return
        core.detect_worker_failure(dead)
        if tracing.ENABLED:
            for w in dead:
                self._trace(Action.MAIN_DETECT_WORKER_FAILURE, worker=w)
        self._fail(_death_message([(self._workers[w].pid, self._dead[w]) for w in dead]))

    def _fail(self, message: str) -> None:
        """Fail-stop: shut down now, and make every later next() raise the same error."""
        self._failure = message
        self._shutdown_workers()
        raise RuntimeError(message)

    def _reap_terminated(self, block: bool) -> None:
        """MainJoinWorker for workers terminated after a failure (reaped without blocking the
        error: the kernel needs tens of ms to tear a torch process down). ``block``: wait
        (bounded, then SIGKILL) instead of only collecting those already gone."""
        core = self._core
        for w in list(self._unreaped):
            p = self._workers[w]
            p.join(timeout=_KILL_JOIN_S if block else 0)
            if p.exitcode is None:
                continue  # (block: only a process stuck in the kernel survives SIGKILL 1 s)
            self._unreaped.remove(w)
            if p.exitcode == -signal.SIGKILL:
                # Logged now, when it is known that our kill (not the worker's own exit after
                # its sentinel, a race at the deadline) ended it; a killed worker logs nothing.
                core.terminate_worker(w)
                if tracing.ENABLED:
                    self._trace(Action.MAIN_TERMINATE_WORKER, worker=w)
            core.join_worker(w)  # reaped: no zombie
            if tracing.ENABLED:
                self._trace(Action.MAIN_JOIN_WORKER, worker=w)
            p.close()
        if not self._unreaped:
            _live_iters.discard(self)

    # -------------------------------------------------------------- next --------------------
    def _next_data(self) -> Any:
        core = self._core
        core.call_next()
        if tracing.ENABLED:
            self._trace(Action.MAIN_CALL_NEXT)
        if self._failure is not None:  # fail-stop: raise again at once, reading nothing
            self._reap_terminated(block=False)
            raise RuntimeError(self._failure)
        while True:
            action = core.next_action()
            if action is Action.MAIN_SKIP_EXHAUSTED:
                task = core.rcvd_idx
                core.skip_exhausted()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_SKIP_EXHAUSTED, task=task)
            elif action is Action.MAIN_STOP_ITERATION:
                if core.phase.value == "running" and self._try_put_index():
                    continue  # a put skipped earlier (worker share full): the epoch goes on
                shut_down = core.stop_iteration()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_STOP_ITERATION)
                if shut_down:
                    self._shutdown_workers()
                raise StopIteration
            elif action is Action.MAIN_MARK_WORKER_UNAVAILABLE:
                worker, task = core.exhausted_worker, core.exhausted_task
                assert worker is not None  # next_action() said so
                send_sentinel = core.mark_worker_as_unavailable(worker)
                if tracing.ENABLED:
                    self._trace(Action.MAIN_MARK_WORKER_UNAVAILABLE, worker=worker, task=task)
                if send_sentinel:
                    self._send(worker, None)
                self._try_put_index()
            elif action is Action.MAIN_PROCESS_DATA:
                delivery = core.process_data()
                if tracing.ENABLED:
                    self._trace(
                        Action.MAIN_PROCESS_DATA,
                        worker=delivery.worker,
                        task=delivery.idx,
                        kind=delivery.kind.value,
                    )
                self._try_put_index()
                if delivery.kind is Kind.ERROR:
                    delivery.payload.reraise()
                return delivery.payload
            else:  # MAIN_GET_DATA
                _, worker, idx, kind, payload = self._get_event()
                core.get_data(worker, idx, Kind(kind), payload)
                if tracing.ENABLED:  # a get is logged after it happened
                    self._trace(Action.MAIN_GET_DATA, worker=worker, task=idx, kind=kind)

    # ---------------------------------------------------------- shutdown --------------------
    def _shutdown_workers(self) -> None:
        """Shut down in the seeds' order; bounded; idempotent; leaves nothing behind."""
        if self._shutdown:
            return
        self._shutdown = True
        core = self._core
        try:
            while not core.shutdown:  # let go first (del, loader dropped, exit): MainDropIterator
                core.drop_iterator()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_DROP_ITERATOR)
            if core.pin_memory:
                core.set_pin_done()
                if self._pin_memory_thread is not None and self._wakeup is not None:
                    with self._pin_done_lock:  # see _pin_loop
                        if tracing.ENABLED:
                            self._trace(Action.MAIN_SET_PIN_DONE)
                        self._pin_memory_thread_done_event.set()
                    self._wakeup[1].send_bytes(b"")  # the wake-up put: the thread waits on it
                    self._pin_memory_thread.join()
                elif tracing.ENABLED:
                    self._trace(Action.MAIN_SET_PIN_DONE)
                core.join_pin_thread()
                if tracing.ENABLED:
                    self._trace(Action.MAIN_JOIN_PIN_THREAD)
            core.set_workers_done()
            self._set_workers_done()
            for w in core.needs_sentinel():
                core.put_sentinel(w)
                if tracing.ENABLED:
                    self._trace(Action.MAIN_PUT_SENTINEL, worker=w)
                self._send(w, None)
        finally:
            if self._failure is None:
                self._reap_workers(_JOIN_S)
                self._reap_terminated(block=True)
            else:
                self._reap_workers(0.0)  # the iterator is dead: terminate, reap later
                self._reap_terminated(block=False)
            self._receiver.close()
            for conn in self._index_conns:
                conn.close()
            if self._wakeup is not None:
                for conn in self._wakeup:
                    conn.close()

    def _set_workers_done(self) -> None:
        """MainSetWorkersDone. Traced, the record and the set happen under ``_trace_order``, as
        a worker's timestamp and its look at the event do: a fetch that saw the event clear is
        then logged before this record, a skip that saw it set after it. The wait is bounded: a
        worker killed inside that short section must not stop the shutdown."""
        lock = self._trace_order
        held = lock is not None and lock.acquire(timeout=tracing.ORDER_WAIT_S)
        try:
            if tracing.ENABLED:
                self._trace(Action.MAIN_SET_WORKERS_DONE)
            self._workers_done_event.set()
        finally:
            if held:
                lock.release()

    def _reap_workers(self, grace_s: float) -> None:
        """One join bounded by ``grace_s`` for all workers, then terminate the stragglers (they
        are reaped by ``_reap_terminated``)."""
        core = self._core
        pending = {p.sentinel: w for w, p in enumerate(self._workers)}
        deadline = time.monotonic() + grace_s
        while pending:
            left = max(0.0, deadline - time.monotonic())
            for sentinel in wait(list(pending), left):  # at least one pass: the already dead
                w = pending.pop(sentinel)  # type: ignore[call-overload]
                self._workers[w].join()
                core.join_worker(w)
                if tracing.ENABLED:
                    self._trace(Action.MAIN_JOIN_WORKER, worker=w)
            if left == 0.0:
                break
        for w in pending.values():
            # SIGKILL, not torch's SIGTERM: torch's worker SIGTERM handler exits with status 0,
            # which would hide whether the worker was terminated or exited by itself, and a
            # dataset's own SIGTERM handler could keep a stuck worker alive.
            self._workers[w].kill()
            self._unreaped.append(w)
        for w, p in enumerate(self._workers):
            if w not in self._unreaped:
                p.close()

    def __del__(self) -> None:
        if sys.is_finalizing():
            return  # too late for IO; multiprocessing's own exit handler ends daemon workers
        if not getattr(self, "_shutdown", True):
            self._shutdown_workers()
        if getattr(self, "_unreaped", None):
            self._reap_terminated(block=True)
