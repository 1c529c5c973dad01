"""The main process's side of the DataLoader protocol, as a pure state machine.

Rules of this file (after h11's ``_state.py``):

* Everything that decides *what the main process may do next* lives here: which task goes to which
  worker, which result is handed out, when the epoch ends, what a worker's death means, the order
  of shutdown. Nothing else in ``reference/`` makes a protocol decision.
* This file does not know about processes, pipes, queues, threads, signals or clocks. It never
  blocks and never sleeps. The IO shell (``reference/shell.py``) does the IO and tells the core
  what happened; the core says what must happen next.
* Every method is one action of ``spec/DataLoader.tla``, named by ``loaderspec.vocabulary.
  CORE_METHOD`` (torch's name where torch has one), and every field is the spec variable of the
  same name (torch's field names). A method whose action is not enabled raises
  ``ProtocolViolation(action, state)`` and leaves the state unchanged; the shell translates it
  into torch's public exceptions.

Theory of operation (torch's ``_MultiProcessingDataLoaderIter``, made explicit):

* Tasks are numbered by ``send_idx`` in sampler order. ``try_put_index`` sends task ``send_idx``
  to the next active worker (round robin from ``worker_queue_idx``) while fewer than
  ``prefetch_factor * num_workers`` tasks are sent and not yet handed out or retired (the
  reorder window: torch refills only after a hand-out, ``PrefetchBound``).
* ``task_info[idx] = [worker, buffered]`` for every task sent and not yet handed out or skipped;
  buffered results wait in ``_results`` until ``rcvd_idx`` reaches them (``in_order=True``), or
  are handed out as soon as they arrive (``in_order=False``).
* ``next_action()`` is the query the shell asks in ``__next__``: it returns the one main-process
  action that is enabled. Its answer depends on the state only, so the shell's loop is
  ``while True: act = core.next_action(); ...``.
* An ``IterableDataset`` worker that runs dry reports ``exhausted``; ``mark_worker_as_unavailable``
  retires it; the tasks still queued to it are dropped by the worker (``WorkerSkipIndex``), and
  ``skip_exhausted`` steps ``rcvd_idx`` over their slots, retiring them. A slot already handed
  out (``in_order=False``) is stepped over the same way.
* Fail-stop (docs/architecture.md): after ``detect_worker_failure``, ``detect_pin_failure``,
  ``timeout`` or ``recv_error`` the iterator is ``FAILED`` and hands out nothing more;
  ``process_data`` raises if asked to, and ``call_next`` tells the shell to raise again.
* Persistent workers: ``resume_iteration`` starts epoch ``epoch + 1``; until every worker has
  acknowledged (``drain_resume``) results of the old epoch are dropped (``NoStaleEpochDelivery``).
* Shutdown in the seeds' order, each step checked: ``set_pin_done``, ``join_pin_thread`` (with a
  pin thread), ``set_workers_done``, then ``put_sentinel`` / ``join_worker`` / ``terminate_worker``
  per worker. No sentinel goes out while the pin thread may still read (``PinThreadExitsFirst``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from loaderspec.vocabulary import Action


class Kind(str, enum.Enum):
    """What a message from a worker carries (the trace's ``kind``)."""

    DATA = "data"  # a fetched batch
    ERROR = "error"  # an ExceptionWrapper: raised in its turn, iteration goes on
    EXHAUSTED = "exhausted"  # the worker's IterableDataset shard ran dry
    RESUME = "resume"  # acknowledgement of a new epoch (persistent workers)


class Phase(str, enum.Enum):
    """Where the iterator stands. Only RUNNING hands out batches."""

    RUNNING = "running"
    RESUMING = "resuming"  # persistent workers: waiting for every worker's resume ack
    ENDED = "ended"  # StopIteration was raised
    FAILED = "failed"  # a worker died or the timeout expired: fail-stop
    DROPPED = "dropped"  # the user let go of the iterator (del, break, error in the loop)


_A = Action
_P = Phase

# Which iteration actions each phase enables, and the phase each leads to. The guards inside a
# phase (the prefetch bound, which slot is buffered, who is exhausted) are in the methods; the
# shutdown actions are ordered among themselves (see the methods) and allowed in every phase once
# ``shutdown`` is decided. Read it as the state diagram:
#
#   RUNNING --StopIteration--> ENDED --ResumeIteration--> RESUMING --last DrainResume--> RUNNING
#   RUNNING --DropIterator--> DROPPED --ResumeIteration--> RESUMING      (persistent workers)
#   RUNNING/RESUMING --DetectWorkerFailure/DetectPinFailure/Timeout/a failed read--> FAILED
#   (fail-stop: no exit; a next() on a FAILED iterator raises again at once, CallNext changes
#   nothing)
PHASE_TRANSITIONS: dict[Phase, dict[Action, Phase]] = {
    _P.RUNNING: {
        _A.MAIN_CALL_NEXT: _P.RUNNING,
        _A.MAIN_TRY_PUT_INDEX: _P.RUNNING,
        _A.MAIN_GET_DATA: _P.RUNNING,
        _A.MAIN_PROCESS_DATA: _P.RUNNING,
        _A.MAIN_SKIP_EXHAUSTED: _P.RUNNING,
        _A.MAIN_MARK_WORKER_UNAVAILABLE: _P.RUNNING,
        _A.MAIN_STOP_ITERATION: _P.ENDED,
        _A.MAIN_DETECT_WORKER_FAILURE: _P.FAILED,
        _A.MAIN_DETECT_PIN_FAILURE: _P.FAILED,
        _A.MAIN_TIMEOUT: _P.FAILED,
        _A.FAULT_RECV_ERROR: _P.FAILED,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.RESUMING: {
        _A.MAIN_DRAIN_RESUME: _P.RESUMING,  # RUNNING once the last ack is in
        _A.MAIN_DETECT_WORKER_FAILURE: _P.FAILED,
        _A.MAIN_DETECT_PIN_FAILURE: _P.FAILED,
        _A.MAIN_TIMEOUT: _P.FAILED,
        _A.FAULT_RECV_ERROR: _P.FAILED,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.ENDED: {
        _A.MAIN_CALL_NEXT: _P.ENDED,
        _A.MAIN_STOP_ITERATION: _P.ENDED,  # next() after the end raises StopIteration again
        _A.MAIN_RESUME_ITERATION: _P.RESUMING,
        _A.MAIN_DROP_ITERATOR: _P.ENDED,
    },
    _P.DROPPED: {
        _A.MAIN_RESUME_ITERATION: _P.RESUMING,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.FAILED: {_A.MAIN_CALL_NEXT: _P.FAILED},
}

# Once shutdown is decided, the only iteration actions left are a next() call on an ended or
# failed iterator and repeating StopIteration.
_AFTER_SHUTDOWN = {
    (_P.ENDED, _A.MAIN_CALL_NEXT),
    (_P.ENDED, _A.MAIN_STOP_ITERATION),
    (_P.FAILED, _A.MAIN_CALL_NEXT),
}


class ProtocolViolation(Exception):
    """An action was asked of the core while the spec does not enable it.

    The core's state is unchanged. ``action`` is the spec action, ``state`` a snapshot.
    """

    def __init__(self, action: Action, state: dict[str, Any], why: str) -> None:
        self.action = action
        self.state = state
        self.why = why
        super().__init__(f"can't take {action.value} when {why}; state={state}")


@dataclass(frozen=True)
class Delivery:
    """What ``process_data`` hands to the shell: one result, in its turn."""

    idx: int
    worker: int
    kind: Kind
    payload: Any  # the batch, or the ExceptionWrapper to reraise


class ProtocolCore:
    """The main process's protocol state and its transitions (one method per spec action)."""

    def __init__(
        self,
        num_workers: int,
        prefetch_factor: int,
        *,
        in_order: bool = True,
        persistent_workers: bool = False,
        iterable: bool = False,
        pin_memory: bool = False,
    ) -> None:
        if num_workers <= 0 or prefetch_factor <= 0:
            raise ValueError("the protocol core needs num_workers > 0 and prefetch_factor > 0")
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.in_order = in_order
        self.persistent_workers = persistent_workers
        self.iterable = iterable
        self.pin_memory = pin_memory
        self.max_tasks = prefetch_factor * num_workers
        self.epoch = 0
        # Shutdown state, across epochs.
        self.shutdown = False
        self.pin_memory_thread_done_event = False
        self.pin_thread_joined = not pin_memory  # no pin thread: nothing to wait for
        self.workers_done_event = False
        self.sentinel_sent = [False] * num_workers  # None put into the worker's index queue
        self.worker_exited = [False] * num_workers  # joined or terminated
        self._reset_epoch()
        self.phase = Phase.RUNNING

    # ---------------------------------------------------------------- state -----------------
    def _reset_epoch(self) -> None:
        """torch's ``_reset``: the per-epoch fields."""
        self.send_idx = 0  # idx of the next task to be sent to workers
        self.rcvd_idx = 0  # idx of the next task to be handed out in order
        self.task_info: dict[int, list[Any]] = {}  # idx -> [worker, buffered]
        self.tasks_outstanding = 0  # sent, not yet received (nor retired)
        self.workers_status = [True] * self.num_workers  # active in this epoch
        self.workers_num_tasks = [0] * self.num_workers  # sent, not yet handed out
        self.worker_queue_idx = 0  # round-robin cursor
        self.resume_pending: set[int] = set()
        self.delivered: list[int] = []  # task idxs handed out this epoch (for the properties)
        self.retired: set[int] = set()  # tasks dropped because their worker ran dry
        self._results: dict[int, tuple[Kind, Any]] = {}
        self._ready: int | None = None  # in_order=False: the result to hand out now
        self.exhausted_worker: int | None = None  # worker whose exhaustion awaits marking
        self.exhausted_task = -1

    def snapshot(self) -> dict[str, Any]:
        """The main process's spec variables, as a trace record's ``state``."""
        return {
            "send_idx": self.send_idx,
            "rcvd_idx": self.rcvd_idx,
            "tasks_outstanding": self.tasks_outstanding,
            "workers_status": list(self.workers_status),
            "task_info": {str(i): [w, b] for i, (w, b) in sorted(self.task_info.items())},
            "shutdown": self.shutdown,
        }

    def _violation(self, action: Action, why: str) -> ProtocolViolation:
        return ProtocolViolation(action, {"phase": self.phase.value, **self.snapshot()}, why)

    def _require(self, ok: bool, action: Action, why: str) -> None:
        if not ok:
            raise self._violation(action, why)

    def _target(self, action: Action) -> Phase:
        """The phase ``action`` leads to from here (``PHASE_TRANSITIONS``), or a violation."""
        target = PHASE_TRANSITIONS[self.phase].get(action)
        self._require(target is not None, action, f"phase={self.phase.value}")
        self._require(
            not self.shutdown or (self.phase, action) in _AFTER_SHUTDOWN,
            action,
            "the iterator is shut down",
        )
        assert target is not None
        return target

    @property
    def failed(self) -> bool:
        return self.phase is Phase.FAILED

    def call_next(self) -> bool:
        """MainCallNext: the user called next(). Returns False on a failed iterator: the call
        reads and waits for nothing, the shell raises the failure again at once (fail-stop)."""
        self._target(Action.MAIN_CALL_NEXT)
        return self.phase is not Phase.FAILED

    def next_action(self) -> Action:
        """The one main-process action ``__next__`` takes now (torch's ``_next_data`` loop).

        Raises:
            ProtocolViolation: the iterator failed, was dropped or shut down: nothing is enabled.
        """
        if self.phase is Phase.ENDED:
            self._target(Action.MAIN_STOP_ITERATION)
            return Action.MAIN_STOP_ITERATION
        if self.phase is Phase.RESUMING:
            self._target(Action.MAIN_DRAIN_RESUME)
            return Action.MAIN_DRAIN_RESUME
        self._target(Action.MAIN_GET_DATA)  # RUNNING and not shut down, or a violation
        if self.exhausted_worker is not None:
            return Action.MAIN_MARK_WORKER_UNAVAILABLE
        if self._ready is not None:
            return Action.MAIN_PROCESS_DATA
        if self.rcvd_idx < self.send_idx:
            info = self.task_info.get(self.rcvd_idx)
            if info is None or (not info[1] and not self.workers_status[info[0]]):
                return Action.MAIN_SKIP_EXHAUSTED
            return Action.MAIN_PROCESS_DATA if info[1] else Action.MAIN_GET_DATA
        return Action.MAIN_STOP_ITERATION

    # ---------------------------------------------------------- dispatch --------------------
    def next_worker(self) -> int | None:
        """The worker ``try_put_index`` would send to now, or None (a pure query).

        torch pulls an index first and drops it when no worker qualifies; asking first means an
        index is never pulled from the sampler without a worker to take it.
        """
        if self.phase is not Phase.RUNNING or self.shutdown:
            return None
        if len(self.task_info) >= self.max_tasks:  # the reorder window is full (PrefetchBound)
            return None
        active = sum(self.workers_status)
        for step in range(self.num_workers):
            w = (self.worker_queue_idx + step) % self.num_workers
            if not self.workers_status[w]:
                continue
            # in_order=False: keep each worker's share fair so one slow worker cannot hold
            # every prefetch slot (torch's rule).
            if self.in_order or self.workers_num_tasks[w] < self.max_tasks // active:
                return w
        return None

    def try_put_index(self, worker: int) -> int:
        """MainTryPutIndex: task ``send_idx`` goes to ``worker``; returns its idx."""
        act = Action.MAIN_TRY_PUT_INDEX
        self._target(act)
        self._require(
            len(self.task_info) < self.max_tasks,
            act,
            "prefetch bound reached (the reorder window is full)",
        )
        self._require(self.next_worker() == worker, act, f"worker {worker} is not next")
        idx = self.send_idx
        self.task_info[idx] = [worker, False]
        self.workers_num_tasks[worker] += 1
        self.tasks_outstanding += 1
        self.send_idx += 1
        self.worker_queue_idx = (worker + 1) % self.num_workers
        return idx

    # ----------------------------------------------------------- receive --------------------
    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        """MainGetData: one (idx, result) message of ``worker`` arrived."""
        act = Action.MAIN_GET_DATA
        self._target(act)
        self._require(self.tasks_outstanding > 0, act, "no task is outstanding")
        info = self.task_info.get(idx)
        self._require(
            info is not None and info[0] == worker and not info[1],
            act,
            f"task {idx} is not outstanding at worker {worker}",
        )
        self._require(kind is not Kind.RESUME, act, "a resume ack outside a resume")
        self._require(kind is not Kind.EXHAUSTED or self.iterable, act, "exhausted map dataset")
        self.tasks_outstanding -= 1
        info[1] = True
        if kind is Kind.EXHAUSTED:
            # The spec keeps the exhaustion in its slot until MainMarkWorkerUnavailable drops it.
            self.exhausted_worker, self.exhausted_task = worker, idx
            return
        self._results[idx] = (kind, payload)
        if not self.in_order:
            self._ready = idx

    def mark_worker_as_unavailable(self, worker: int) -> bool:
        """MainMarkWorkerUnavailable: retire a worker whose shard ran dry.

        Drops the exhaustion's slot. Tasks still queued to the worker are dropped by it
        (WorkerSkipIndex); ``skip_exhausted`` retires their slots when ``rcvd_idx`` gets there.
        Returns whether the shell must put the None sentinel now (not with persistent workers:
        they wait for the next epoch).
        """
        act = Action.MAIN_MARK_WORKER_UNAVAILABLE
        self._target(act)
        self._require(self.exhausted_worker == worker, act, f"worker {worker} did not run dry")
        del self.task_info[self.exhausted_task]
        self.retired.add(self.exhausted_task)
        self.exhausted_worker = None
        self.workers_status[worker] = False
        if self.persistent_workers:
            return False
        self.sentinel_sent[worker] = True
        return True

    def process_data(self) -> Delivery:
        """MainProcessData: hand out the next result (rcvd_idx's, or any with in_order=False)."""
        act = Action.MAIN_PROCESS_DATA
        self._target(act)
        if self._ready is not None:
            idx = self._ready
        else:
            idx = self.rcvd_idx
            info = self.task_info.get(idx)
            self._require(info is not None and info[1], act, f"task {idx} is not buffered")
        self._ready = None
        worker, _ = self.task_info.pop(idx)
        kind, payload = self._results.pop(idx)
        if idx == self.rcvd_idx:
            self.rcvd_idx += 1
        self.workers_num_tasks[worker] -= 1
        self.delivered.append(idx)
        return Delivery(idx, worker, kind, payload)

    def skip_exhausted(self) -> None:
        """MainSkipExhausted: step rcvd_idx over a retired or already handed-out slot."""
        act = Action.MAIN_SKIP_EXHAUSTED
        self._target(act)
        self._require(self.next_action() is act, act, "rcvd_idx's slot is live")
        if self.task_info.pop(self.rcvd_idx, None) is not None:
            # A retired worker's task: it will never answer, so it is no longer outstanding.
            self.retired.add(self.rcvd_idx)
            self.tasks_outstanding -= 1
        self.rcvd_idx += 1

    def stop_iteration(self) -> bool:
        """MainStopIteration: nothing is left. Returns whether to shut down now."""
        act = Action.MAIN_STOP_ITERATION
        target = self._target(act)
        self._require(self.next_action() is act, act, "tasks are still pending")
        self.phase = target
        self.shutdown = not self.persistent_workers
        return self.shutdown

    # ------------------------------------------------------------ faults --------------------
    def depends_on(self, worker: int) -> bool:
        """Whether a death of ``worker`` is a failure now (the spec's ``DependsOnDead``).

        Only an active worker of a running or resuming iterator: a retired worker's death waits
        until a new epoch makes it active again (then it is reported).
        """
        return (
            self.workers_status[worker]
            and self.phase in (Phase.RUNNING, Phase.RESUMING)
            and not self.shutdown
        )

    def detect_worker_failure(self, workers: list[int]) -> None:
        """MainDetectWorkerFailure: workers died that the iterator depends on. Fail-stop."""
        act = Action.MAIN_DETECT_WORKER_FAILURE
        target = self._target(act)
        self._require(
            bool(workers) and all(self.depends_on(w) for w in workers), act, "no dependent death"
        )
        self.phase = target
        self.shutdown = True

    def timeout(self) -> None:
        """MainTimeout: nothing arrived within ``timeout`` seconds. Fail-stop."""
        self._fail_stop(Action.MAIN_TIMEOUT)

    def detect_pin_failure(self) -> None:
        """MainDetectPinFailure: the pin-memory thread died. Fail-stop."""
        self._fail_stop(Action.MAIN_DETECT_PIN_FAILURE)

    def recv_error(self) -> None:
        """FaultRecvError: reading a result failed (the message is lost). Fail-stop."""
        self._fail_stop(Action.FAULT_RECV_ERROR)

    def _fail_stop(self, action: Action) -> None:
        self.phase = self._target(action)
        self.shutdown = True

    def drop_iterator(self) -> bool:
        """MainDropIterator: the user let go (del, break, error in the loop, a new epoch).

        Persistent workers survive a break mid-epoch (a later resume starts the next epoch);
        anything else starts the shutdown. Returns whether it did.
        """
        act = Action.MAIN_DROP_ITERATOR
        keep_workers = self.persistent_workers and self.phase is Phase.RUNNING
        self.phase = self._target(act)
        if keep_workers:
            return False
        self.shutdown = True
        return True

    # --------------------------------------------------- persistent epochs ------------------
    def resume_iteration(self) -> list[int]:
        """MainResumeIteration: a new epoch on the same workers. Returns who gets a resume."""
        act = Action.MAIN_RESUME_ITERATION
        self._require(self.persistent_workers, act, "workers are not persistent")
        target = self._target(act)
        self.epoch += 1
        self._reset_epoch()
        self.resume_pending = set(range(self.num_workers))
        self.phase = target
        return sorted(self.resume_pending)

    def drain_resume(self, worker: int, kind: Kind) -> bool:
        """MainDrainResume: a message during a resume. Old results are dropped (stale epoch).

        Returns True when the result was a stale one that was dropped.
        """
        act = Action.MAIN_DRAIN_RESUME
        self._target(act)
        if kind is not Kind.RESUME:
            return True
        self._require(worker in self.resume_pending, act, f"worker {worker} already resumed")
        self.resume_pending.discard(worker)
        if not self.resume_pending:
            self.phase = Phase.RUNNING
        return False

    # ---------------------------------------------------------- shutdown --------------------
    def set_pin_done(self) -> None:
        """MainSetPinDone: pin_memory_thread_done_event.set() and the wake-up put."""
        act = Action.MAIN_SET_PIN_DONE
        self._require(self.shutdown, act, "no shutdown was decided")
        self._require(self.pin_memory and not self.pin_memory_thread_done_event, act, "no pin")
        self.pin_memory_thread_done_event = True

    def join_pin_thread(self) -> None:
        """MainJoinPinThread: the pin thread has exited."""
        act = Action.MAIN_JOIN_PIN_THREAD
        self._require(self.pin_memory_thread_done_event, act, "the pin thread was not told")
        self.pin_thread_joined = True

    def set_workers_done(self) -> None:
        """MainSetWorkersDone: workers_done_event.set(), after the pin thread is gone."""
        act = Action.MAIN_SET_WORKERS_DONE
        self._require(self.shutdown, act, "no shutdown was decided")
        self._require(self.pin_thread_joined, act, "the pin thread still reads")
        self._require(not self.workers_done_event, act, "already set")
        self.workers_done_event = True

    def needs_sentinel(self) -> list[int]:
        """Workers still owed the None sentinel at shutdown."""
        return [w for w in range(self.num_workers) if not self.sentinel_sent[w]]

    def put_sentinel(self, worker: int) -> None:
        """MainPutSentinel: None into one worker's index queue."""
        act = Action.MAIN_PUT_SENTINEL
        self._require(self.workers_done_event and self.pin_thread_joined, act, "too early")
        self._require(worker in self.needs_sentinel(), act, f"worker {worker} has its sentinel")
        self.sentinel_sent[worker] = True

    def join_worker(self, worker: int) -> None:
        """MainJoinWorker: the worker has exited."""
        act = Action.MAIN_JOIN_WORKER
        self._require(
            self.workers_done_event and all(self.sentinel_sent), act, "sentinels still to send"
        )
        self.worker_exited[worker] = True

    def terminate_worker(self, worker: int) -> None:
        """MainTerminateWorker: the bounded join ran out; the worker is killed."""
        act = Action.MAIN_TERMINATE_WORKER
        self._require(
            self.workers_done_event and all(self.sentinel_sent), act, "sentinels still to send"
        )
        self._require(not self.worker_exited[worker], act, f"worker {worker} already exited")
        self.worker_exited[worker] = True
