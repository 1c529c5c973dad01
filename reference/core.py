"""The main process's side of the DataLoader protocol, as a pure state machine.

Rules of this file (after h11's ``_state.py``):

* Everything that decides what the main process does next lives here: when a task is sent and
  to which worker (the initial prefetch, the refill after a hand-out, the StopIteration guard),
  which result is handed out, when the epoch ends, what a worker's death or a timeout means, and
  the order of shutdown. Nothing else in ``reference/`` makes a protocol decision.
* This file does not know processes, pipes, queues, threads, signals or clocks, and imports
  nothing that does (not torch). It never blocks. ``reference/loop.py`` runs it: it asks
  ``next_action()``, has its port (the IO shell, or the test model) do the IO, and takes the step.
* Every action method is one action of ``spec/DataLoader.tla``, named by ``loaderspec.vocabulary.
  CORE_METHOD`` (torch's name where torch has one), and every field the spec variable of the
  same name (torch's field names). A method whose action is not enabled raises
  ``ProtocolViolation(action, state)`` and leaves the state unchanged; the shell translates it
  into torch's public exceptions at one boundary. After each action ``last`` is the step taken,
  with its parameters: the trace record is written from it.

Theory of operation (torch's ``_MultiProcessingDataLoaderIter``, made explicit):

* The user's calls are requests (``ask``): a new iterator prefetches (``PREFETCH``), ``iter()``
  again on persistent workers resumes (``RESUME``), ``next()`` asks for a batch (``NEXT``, which
  becomes ``REFILL`` once a result is handed out), letting go shuts down (``SHUTDOWN``). Every
  ``next()`` begins with ``call_next`` (MainCallNext: the main thread is now ``in_call``, the
  spec's variable); the step that returns or raises ends the call.
* ``next_action()`` answers the first enabled action of the row ``NEXT_ACTIONS[request][phase]``
  (once shutdown is decided and the user asks for it, of ``SHUTDOWN_ACTIONS[stage]``), as a
  ``Step`` with its parameters, or None when the request is served. Each action's guard is
  written once (``GUARDS``: the spec's guard, with the action's parameters); the action method
  refuses what it refuses, and the row's proposal (``PROPOSALS``) asks it, adding only torch's
  policy of *when* it tries the action (the put budget, a wait only while next() waits) and the
  parameters it picks.
* Four actions are enabled only by an event the world reports (``ALARM_ACTIONS``: a death, the
  pin thread's death, a wait that ran out, a shard run dry). Until one is reported (``alarm``)
  ``next_action()`` walks the rows without them (``_QUIET_ROWS``): the same answers, with 4
  guards fewer on the steps of almost every batch.
* Events that are not spec actions: ``worker_ended(w)`` (a worker process ended; a death while
  the iterator depends on it enables ``MainDetectWorkerFailure``), ``pin_thread_died()`` (enables
  ``MainDetectPinFailure``), ``deadline_passed()`` (a wait ran out: ``MainTimeout``, unless a
  death the loader can see is reported first: the row puts the detection before the timeout, as
  the spec's guard does) and ``sampler_ran_dry()``. A read that failed is itself a step, taken
  when the port reports it (``recv_error``, the spec's FaultRecvError: the message is lost).
* Tasks are numbered by ``send_idx`` in sampler order. The spec's guard of a put is the reorder
  window: fewer than ``max_tasks`` tasks sent and not yet handed out or retired
  (``len(task_info)``). When to try one is torch's policy: ``prefetch_factor * num_workers``
  puts when an epoch starts and one after each hand-out or retirement, the put budget
  (``_put_budget``), which never exceeds the window's room. A try that finds no eligible worker
  keeps its budget for later (torch drops it). ``NothingLeft`` (the StopIteration guard) holds
  only once the sampler ran dry or no worker is active; before that a put is due whatever the
  budget.
* ``task_info[idx] = [worker, buffered]`` for every task sent and not yet handed out or retired;
  buffered results wait in ``_results`` until ``rcvd_idx`` reaches them (``in_order=True``), or
  are handed out as soon as they arrive (``in_order=False``).
* An ``IterableDataset`` worker that runs dry reports ``exhausted``; ``mark_worker_as_unavailable``
  retires it; the tasks still queued to it are dropped by the worker (``WorkerSkipIndex``) and
  ``skip_exhausted`` steps ``rcvd_idx`` over their slots. A slot already handed out
  (``in_order=False``) is stepped over the same way.
* Fail-stop (docs/architecture.md): after ``detect_worker_failure``, ``detect_pin_failure``,
  ``timeout`` or ``recv_error`` the iterator is ``FAILED`` (``failure`` says why) and hands out
  nothing more: a later ``next()`` is ``call_next`` and nothing else, and raises the failure
  again.
* Persistent workers: ``resume_iteration`` starts epoch ``epoch + 1``; until every worker has
  acknowledged (``drain_resume``) results of the old epoch are dropped (``NoStaleEpochDelivery``).
* Shutdown is the table ``SHUTDOWN_TRANSITIONS``, in the seeds' order: the pin thread first
  (``set_pin_done``, ``join_pin_thread``), then ``set_workers_done``, a sentinel per worker, and a
  join (or a terminate, then a join) per worker. No sentinel goes out while the pin thread may
  still read (``PinThreadExitsFirst``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from loaderspec.vocabulary import Action


class Kind(str, enum.Enum):
    """What a message from a worker carries (the trace's ``kind``)."""

    DATA = "data"  # a fetched batch
    ERROR = "error"  # an ExceptionWrapper: raised in its turn, iteration goes on
    EXHAUSTED = "exhausted"  # the worker's IterableDataset shard ran dry
    RESUME = "resume"  # acknowledgement of a new epoch (persistent workers)


class _State(enum.Enum):
    """An enum of the core's own states. Members are singletons compared by identity, so they
    hash by identity too: ``Enum.__hash__`` is a Python function, and these key the tables
    ``next_action()`` reads on every step of every batch."""

    __hash__ = object.__hash__


class Phase(_State):
    """Where the iterator stands. Only RUNNING hands out batches."""

    RUNNING = "running"
    RESUMING = "resuming"  # persistent workers: waiting for every worker's resume ack
    ENDED = "ended"  # StopIteration was raised
    FAILED = "failed"  # a fatal error (death, timeout, failed read, pin thread): fail-stop
    DROPPED = "dropped"  # the user let go of the iterator (del, break, error in the loop)


class Request(_State):
    """What the user asked of the iterator: the row ``next_action()`` answers from."""

    PREFETCH = "prefetch"  # iter() made this iterator: fill the prefetch window
    RESUME = "resume"  # iter() again on persistent workers: a new epoch, then PREFETCH
    NEXT = "next"  # next(): MainCallNext, then hand out one result (then REFILL) or raise
    REFILL = "refill"  # the rest of next() after a hand-out: torch's _try_put_index
    SHUTDOWN = "shutdown"  # the user let go (del, break, exit), or shutdown was decided


class Stage(_State):
    """How far the shutdown has come, in the seeds' order."""

    OPEN = "open"  # no shutdown decided
    PIN_RUNNING = "pin running"  # decided; the pin thread still reads
    PIN_TOLD = "pin told"  # its done event is set; not joined yet
    PIN_GONE = "pin gone"  # joined, or there is none: the workers may be told
    WORKERS_TOLD = "workers told"  # workers_done_event is set: sentinels, joins, terminations


class Decided(_State):
    """How a decided shutdown begins. Not a spec step of its own: the core decides it within the
    step that ends the iteration (StopIteration, a fatal error, the user letting go)."""

    WITH_PIN = "shutdown decided (a pin thread)"
    NO_PIN = "shutdown decided (no pin thread)"


_A, _P, _R, _S = Action, Phase, Request, Stage
# What every batch's steps compare with, as module names: ``Action.X`` (any enum member read
# off its class) takes 90-135 ns on Python 3.11, a module name next to nothing.
_TRY_PUT, _GET, _PROCESS = _A.MAIN_TRY_PUT_INDEX, _A.MAIN_GET_DATA, _A.MAIN_PROCESS_DATA
_CALL = _A.MAIN_CALL_NEXT
_DATA, _ERROR, _EXHAUSTED, _RESUME = Kind.DATA, Kind.ERROR, Kind.EXHAUSTED, Kind.RESUME
_RUNNING, _RESUMING, _FAILED = _P.RUNNING, _P.RESUMING, _P.FAILED
_NEXT, _REFILL, _SHUTDOWN = _R.NEXT, _R.REFILL, _R.SHUTDOWN
# Step(...) without NamedTuple's Python-level __new__ (half the cost), for the per-batch steps.
_new_step = tuple.__new__

# Which iteration actions each phase enables, and the phase each leads to. Read it as the state
# diagram:
#
#   RUNNING --StopIteration--> ENDED --ResumeIteration--> RESUMING --last DrainResume--> RUNNING
#   RUNNING --DropIterator--> DROPPED --ResumeIteration--> RESUMING      (persistent workers)
#   RUNNING/RESUMING --DetectWorkerFailure/DetectPinFailure/Timeout/FaultRecvError--> FAILED
#   (fail-stop: no exit; a next() on a FAILED iterator is CallNext, which changes nothing)
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

# Once shutdown is decided, the only iteration actions left are a next() on an ended iterator
# (StopIteration again) and a next() on a failed one (it raises again).
_AFTER_SHUTDOWN = {
    (_P.ENDED, _A.MAIN_CALL_NEXT),
    (_P.ENDED, _A.MAIN_STOP_ITERATION),
    (_P.FAILED, _A.MAIN_CALL_NEXT),
}

# The shutdown actions each stage enables, and the stage each leads to (the seeds' order):
#
#   OPEN --(shutdown decided)--> PIN_RUNNING --SetPinDone--> PIN_TOLD --JoinPinThread--> PIN_GONE
#   OPEN --(decided, no pin thread)--> PIN_GONE --SetWorkersDone--> WORKERS_TOLD
#   WORKERS_TOLD: PutSentinel per worker owed one, then JoinWorker (or TerminateWorker and
#   JoinWorker) per worker.
SHUTDOWN_TRANSITIONS: dict[Stage, dict[Action | Decided, Stage]] = {
    _S.OPEN: {Decided.WITH_PIN: _S.PIN_RUNNING, Decided.NO_PIN: _S.PIN_GONE},
    _S.PIN_RUNNING: {_A.MAIN_SET_PIN_DONE: _S.PIN_TOLD},
    _S.PIN_TOLD: {_A.MAIN_JOIN_PIN_THREAD: _S.PIN_GONE},
    _S.PIN_GONE: {_A.MAIN_SET_WORKERS_DONE: _S.WORKERS_TOLD},
    _S.WORKERS_TOLD: {
        _A.MAIN_PUT_SENTINEL: _S.WORKERS_TOLD,
        _A.MAIN_TERMINATE_WORKER: _S.WORKERS_TOLD,
        _A.MAIN_JOIN_WORKER: _S.WORKERS_TOLD,
    },
}

# What the main process does next, by request and phase: the first action of the row whose guard
# holds. A missing row means the request cannot be served in that phase (a violation); a row
# with nothing enabled means the request is served. Fail-stop is the FAILED row of NEXT: the call
# and nothing else (the loop raises the failure again). A worker's death comes first in a row,
# so it wins over a timeout found at the same wait (the spec's MainTimeout guard).
NEXT_ACTIONS: dict[Request, dict[Phase, tuple[Action, ...]]] = {
    _R.PREFETCH: {_P.RUNNING: (_A.MAIN_TRY_PUT_INDEX,)},
    _R.RESUME: {
        _P.RUNNING: (_A.MAIN_DROP_ITERATOR,),  # the last epoch was broken off
        _P.ENDED: (_A.MAIN_RESUME_ITERATION,),
        _P.DROPPED: (_A.MAIN_RESUME_ITERATION,),
        _P.RESUMING: (
            _A.MAIN_DETECT_WORKER_FAILURE,
            _A.MAIN_DETECT_PIN_FAILURE,
            _A.MAIN_TIMEOUT,
            _A.MAIN_DRAIN_RESUME,
        ),
    },
    _R.NEXT: {
        _P.RUNNING: (
            _A.MAIN_CALL_NEXT,
            _A.MAIN_DETECT_WORKER_FAILURE,
            _A.MAIN_TRY_PUT_INDEX,  # a due put first: retire, then sentinel, then put
            _A.MAIN_MARK_WORKER_UNAVAILABLE,
            _A.MAIN_PROCESS_DATA,
            _A.MAIN_SKIP_EXHAUSTED,
            # Known only from a wait, so only where the next step would be the wait: nothing
            # before them is enabled then, and a wait's event enables none of it.
            _A.MAIN_DETECT_PIN_FAILURE,
            _A.MAIN_TIMEOUT,
            _A.MAIN_GET_DATA,
            _A.MAIN_STOP_ITERATION,
        ),
        _P.ENDED: (_A.MAIN_CALL_NEXT, _A.MAIN_STOP_ITERATION),
        _P.FAILED: (_A.MAIN_CALL_NEXT,),
    },
    _R.REFILL: {_P.RUNNING: (_A.MAIN_TRY_PUT_INDEX,)},
    _R.SHUTDOWN: {phase: (_A.MAIN_DROP_ITERATOR,) for phase in Phase},
}
# The action a request stands for, to name it in a violation.
_REQUEST_ACTION: dict[Request, Action] = {
    _R.PREFETCH: _A.MAIN_TRY_PUT_INDEX,
    _R.RESUME: _A.MAIN_RESUME_ITERATION,
    _R.NEXT: _A.MAIN_GET_DATA,
    _R.REFILL: _A.MAIN_TRY_PUT_INDEX,
    _R.SHUTDOWN: _A.MAIN_DROP_ITERATOR,
}
# Once shutdown is decided, a SHUTDOWN request is answered from the stage.
SHUTDOWN_ACTIONS: dict[Stage, tuple[Action, ...]] = {
    _S.OPEN: (),
    _S.PIN_RUNNING: (_A.MAIN_SET_PIN_DONE,),
    _S.PIN_TOLD: (_A.MAIN_JOIN_PIN_THREAD,),
    _S.PIN_GONE: (_A.MAIN_SET_WORKERS_DONE,),
    _S.WORKERS_TOLD: (_A.MAIN_PUT_SENTINEL, _A.MAIN_JOIN_WORKER),
}


# The spec's names for the phase (its iter_state) and for a failure (its failure variable).
_ITER_STATE: dict[Phase, str] = {
    _P.RUNNING: "running",
    _P.RESUMING: "resuming",
    _P.ENDED: "stopped",
    _P.FAILED: "failed",
    _P.DROPPED: "dropped",
}
_FAILURE: dict[Action, str] = {
    _A.MAIN_DETECT_WORKER_FAILURE: "death",
    _A.MAIN_TIMEOUT: "timeout",
    _A.FAULT_RECV_ERROR: "recv",
    _A.MAIN_DETECT_PIN_FAILURE: "pin",
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


class Step(NamedTuple):
    """One main-process action with its parameters: what ``next_action()`` answers, and what a
    trace record says (``last``). ``worker``/``task``/``kind`` as in the trace record."""

    action: Action
    worker: int | None = None
    task: int | None = None
    kind: Kind | None = None


@dataclass(frozen=True)
class Failure:
    """Why a FAILED iterator failed: the action, the workers concerned (the dead ones it
    depended on; the one whose result could not be read) and what the world said of it."""

    action: Action  # MAIN_DETECT_WORKER_FAILURE, _DETECT_PIN_FAILURE, _TIMEOUT, FAULT_RECV_ERROR
    workers: tuple[int, ...] = ()
    detail: str = ""  # the failed read's error, or why the pin thread died


class Delivery(NamedTuple):
    """What ``process_data`` hands to the shell: one result, in its turn."""

    idx: int
    worker: int
    kind: Kind
    payload: Any  # the batch, or the ExceptionWrapper to reraise


@dataclass(frozen=True)
class ProtocolConfig:
    """The constants of the protocol for one iterator (the spec's model constants)."""

    num_workers: int
    prefetch_factor: int
    in_order: bool = True
    persistent_workers: bool = False
    iterable: bool = False  # an IterableDataset: workers may run dry
    pin_memory: bool = False  # a pin-memory thread runs

    def __post_init__(self) -> None:
        if self.num_workers <= 0 or self.prefetch_factor <= 0:
            raise ValueError("the protocol core needs num_workers > 0 and prefetch_factor > 0")


class ProtocolCore:
    """The main process's protocol state and its transitions (one method per spec action)."""

    def __init__(self, config: ProtocolConfig) -> None:
        self.config = config
        self.num_workers = config.num_workers
        self.in_order = config.in_order
        self.persistent_workers = config.persistent_workers
        self.iterable = config.iterable
        self.pin_memory = config.pin_memory
        self.max_tasks = config.prefetch_factor * config.num_workers
        self.epoch = 0
        self.request = Request.PREFETCH
        self.last: Step | None = None  # the step the last action took
        self.failure: Failure | None = None
        self.in_call = False  # the main thread is inside next() (or a resuming iter())
        self.ended: set[int] = set()  # workers whose process has ended (worker_ended)
        self.pin_dead: str | None = None  # why the pin thread died (pin_thread_died), if it did
        self.deadline = False  # the current wait ran out (deadline_passed)
        # Whether an event has enabled one of the ALARM_ACTIONS: _alarmed(), cached, and
        # recomputed wherever what it reads changes. While not, next_action() walks the rows
        # without them (_QUIET_ROWS), whose guards would all refuse: almost every batch's steps.
        self.alarm = False
        # Shutdown state, across epochs.
        self.shutdown = False
        self.stage = Stage.OPEN
        self.sentinel_sent = [False] * config.num_workers  # None put into its index queue
        self.terminated = [False] * config.num_workers
        self.joined = [False] * config.num_workers
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
        self.sampler_dry = False
        self._put_budget = self.max_tasks  # puts torch tries before the next hand-out
        self._results: dict[int, tuple[Kind, Any]] = {}
        self._ready: int | None = None  # in_order=False: the result to hand out now
        self.exhausted_worker: int | None = None  # worker whose exhaustion awaits marking
        self.exhausted_task = -1
        self.alarm = self._alarmed()
        # What a checkpoint describes (docs/checkpoint.md): the tasks handed out this epoch, as
        # the lowest idx not handed out plus the handed ones above it (in_order=False: at most
        # the prefetch window), and per worker how many of its results were handed out.
        self.handed_below = 0
        self.handed_above: set[int] = set()
        self.handed_per_worker = [0] * self.num_workers
        self.last_handed_worker: int | None = None
        # Per worker, what its exhaustion message carried (the dataset's state as its shard ran
        # dry, opaque here): a persistent worker starts the next epoch from it.
        self.ended_payloads: dict[int, Any] = {}
        self.started_payloads: dict[int, Any] = {}  # (the same, as its next epoch began)

    def snapshot(self) -> dict[str, Any]:
        """The main process's spec variables, as a trace record's ``state``
        (``loaderspec.vocabulary.MAIN_STATE_FIELDS``)."""
        stage = self.stage
        return {
            "send_idx": self.send_idx,
            "rcvd_idx": self.rcvd_idx,
            "tasks_outstanding": self.tasks_outstanding,
            "workers_status": list(self.workers_status),
            "task_info": {str(i): [w, b] for i, (w, b) in sorted(self.task_info.items())},
            "shutdown": self.shutdown,
            "iter_state": _ITER_STATE[self.phase],
            "in_call": self.in_call,
            "workers_num_tasks": list(self.workers_num_tasks),
            "worker_queue_idx": self.worker_queue_idx,
            "resume_iteration_cnt": len(self.resume_pending),
            "sentinel_sent": list(self.sentinel_sent),
            "failure": "none" if self.failure is None else _FAILURE[self.failure.action],
            "workers_done_event": stage is Stage.WORKERS_TOLD,
            "pin_memory_thread_done_event": self.pin_memory
            and stage in (Stage.PIN_TOLD, Stage.PIN_GONE, Stage.WORKERS_TOLD),
        }

    def _alarmed(self) -> bool:
        """Whether an event has been reported that may enable one of the ``ALARM_ACTIONS``: a
        worker ended, the pin thread died, a wait ran out, a shard ran dry and awaits marking.
        Without one, each of their guards refuses."""
        return (
            bool(self.ended)
            or self.pin_dead is not None
            or self.deadline
            or self.exhausted_worker is not None
        )

    def _violation(self, action: Action, why: str) -> ProtocolViolation:
        state = {"phase": self.phase.value, "stage": self.stage.value, **self.snapshot()}
        return ProtocolViolation(action, state, why)

    def _check(self, action: Action, why: str | None) -> None:
        """Refuse ``action`` where its guard (``GUARDS``) said why it is not enabled."""
        if why is not None:
            raise self._violation(action, why)

    def _target(self, action: Action) -> Phase:
        """The phase ``action`` leads to from here (``PHASE_TRANSITIONS``), or a violation."""
        target = PHASE_TRANSITIONS[self.phase].get(action)
        if target is None:
            raise self._violation(action, f"phase={self.phase.value}")
        if self.shutdown and (self.phase, action) not in _AFTER_SHUTDOWN:
            raise self._violation(action, "the iterator is shut down")
        return target

    def _stage_target(self, action: Action) -> Stage:
        """The stage ``action`` leads to (``SHUTDOWN_TRANSITIONS``), or a violation."""
        target = SHUTDOWN_TRANSITIONS[self.stage].get(action)
        if target is None:
            raise self._violation(action, f"shutdown stage={self.stage.value}")
        return target

    def _decide_shutdown(self) -> None:
        self.shutdown = True
        how = Decided.WITH_PIN if self.pin_memory else Decided.NO_PIN
        self.stage = SHUTDOWN_TRANSITIONS[Stage.OPEN][how]

    @property
    def failed(self) -> bool:
        return self.phase is Phase.FAILED

    # ------------------------------------------------------ requests and events -------------
    def ask(self, request: Request) -> None:
        """The user's call: ``next()`` (NEXT), ``iter()`` again (RESUME), letting go (SHUTDOWN)."""
        self.request = request

    def worker_ended(self, worker: int) -> None:
        """Event: ``worker``'s process ended (found by its sentinel, or a torn message)."""
        self.ended.add(worker)
        self.alarm = self._alarmed()

    def sampler_ran_dry(self) -> None:
        """Event: the sampler raised StopIteration when asked for the next task's index."""
        self.sampler_dry = True

    def pin_thread_died(self, detail: str) -> None:
        """Event: the pin-memory thread is gone, and everything it passed on has been read."""
        self.pin_dead = detail
        self.alarm = self._alarmed()

    def deadline_passed(self) -> None:
        """Event: a wait ran past the loader's ``timeout`` (reported with the deaths the port
        could see at that moment, so that a death wins over the timeout)."""
        self.deadline = True
        self.alarm = self._alarmed()

    def next_action(self) -> Step | None:
        """The main-process action to take now for the current request, or None when it is served.

        Raises:
            ProtocolViolation: the request cannot be served in this phase (a failed iterator is
                asked for a batch, say); the state is unchanged.
        """
        if self.request is _SHUTDOWN and self.shutdown:
            row = _SHUTDOWN_PROPOSAL_ROWS[self.stage]
        else:
            found = (_PROPOSAL_ROWS if self.alarm else _QUIET_ROWS)[self.request].get(self.phase)
            if found is None:
                why = f"{self.request.value} is asked in phase={self.phase.value}"
                raise self._violation(_REQUEST_ACTION[self.request], why)
            row = found
        for ask, step, pick in row:
            if step is not None:  # a parameterless action: its guard
                if ask(self) is None:
                    return step
            elif pick is not None:  # its guard, then its parameters
                if ask(self) is None:
                    return pick(self)
            else:  # a proposal: torch's policy or a choice of parameters, then the guard
                proposed = ask(self)
                if proposed is not None:
                    return proposed
        return None

    # ---------------------------------------------------------- queries ---------------------
    def next_worker(self) -> int | None:
        """The worker ``try_put_index`` would send to now, or None (the spec's ``NextWorker``).

        torch pulls an index first and drops it when no worker qualifies; asking first means an
        index is never pulled from the sampler without a worker to take it.
        """
        if self.phase is not _RUNNING or self.shutdown:
            return None
        if len(self.task_info) >= self.max_tasks:  # the reorder window is full (PrefetchBound)
            return None
        status, n = self.workers_status, self.num_workers
        if self.in_order:
            for step in range(n):
                w = (self.worker_queue_idx + step) % n
                if status[w]:
                    return w
            return None
        # in_order=False: keep each worker's share fair so one slow worker cannot hold every
        # prefetch slot (torch's rule).
        share = self.max_tasks // sum(status) if any(status) else 0
        for step in range(n):
            w = (self.worker_queue_idx + step) % n
            if status[w] and self.workers_num_tasks[w] < share:
                return w
        return None

    def depends_on(self, worker: int) -> bool:
        """Whether a death of ``worker`` is a failure now (the spec's ``DependsOnDead``).

        Only an active worker of a running or resuming iterator: a retired worker's death waits
        until a new epoch makes it active again (then it is reported).
        """
        return (
            self.workers_status[worker]
            and self.phase in (_RUNNING, _RESUMING)
            and not self.shutdown
        )

    def dead_dependencies(self) -> list[int]:
        """Workers that ended while the iterator depends on them, in order."""
        return [w for w in sorted(self.ended) if self.depends_on(w)]

    def nothing_left(self) -> bool:
        """The spec's ``NothingLeft``: nothing pending, and no task can be sent any more."""
        return self.rcvd_idx == self.send_idx and (self.sampler_dry or not any(self.workers_status))

    def waits_for_data(self) -> bool:
        """The spec's ``WaitsForData``: in order, for ``rcvd_idx``'s result (outstanding at an
        active worker); with in_order=False, for any result while none is buffered; or the acks."""
        phase = self.phase
        if phase is _RESUMING:
            return True
        if phase is not _RUNNING:
            return False
        if self.in_order:
            info = self.task_info.get(self.rcvd_idx)
            return info is not None and not info[1] and self.workers_status[info[0]]
        return self.tasks_outstanding > 0 and not any(b for _, b in self.task_info.values())

    def _hand_out_idx(self) -> int:
        """The task whose result ``process_data`` hands out (once its guard holds): the one just
        arrived with in_order=False, else rcvd_idx's."""
        return self.rcvd_idx if self._ready is None else self._ready

    def needs_sentinel(self) -> list[int]:
        """Workers still owed the None sentinel at shutdown."""
        return [w for w in range(self.num_workers) if not self.sentinel_sent[w]]

    def unjoined(self) -> list[int]:
        """Workers not joined yet (their process may still run, or be unreaped)."""
        return [w for w in range(self.num_workers) if not self.joined[w]]

    @property
    def waits_for_workers(self) -> bool:
        """Whether shutdown gives workers the bounded join before terminating them: not after a
        failure (the iterator is dead; the error is raised at once)."""
        return self.failure is None

    # ---------------------------------------------------------- the call --------------------
    def call_next(self) -> None:
        """MainCallNext: the user called next(); the main thread is inside the call until a
        step returns or raises. On a failed iterator nothing else happens: the loop raises the
        failure again at once, reading and waiting for nothing."""
        act = _CALL
        target = self._target(act)
        why = _call_guard(self)  # (the per-batch methods raise inline: a call less)
        if why is not None:
            raise self._violation(act, why)
        self.phase = target
        self.in_call = target is not _FAILED
        self.last = _CALL_STEP

    # ---------------------------------------------------------- dispatch --------------------
    def try_put_index(self, worker: int) -> int:
        """MainTryPutIndex: task ``send_idx`` goes to ``worker``; returns its idx."""
        act = _TRY_PUT
        self._target(act)
        why = _put_guard(self)
        if why is None and self.next_worker() != worker:
            why = f"worker {worker} is not next"
        if why is not None:
            raise self._violation(act, why)
        idx = self.send_idx
        self.task_info[idx] = [worker, False]
        self.workers_num_tasks[worker] += 1
        self.tasks_outstanding += 1
        self.send_idx += 1
        self.worker_queue_idx = (worker + 1) % self.num_workers
        self._put_budget = max(0, self._put_budget - 1)
        self.last = _new_step(Step, (act, worker, idx, None))
        return idx

    # ----------------------------------------------------------- receive --------------------
    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        """MainGetData: one (idx, result) message of ``worker`` arrived."""
        act = _GET
        self._target(act)
        why = _get_guard(self, worker, idx, kind)
        if why is not None:
            raise self._violation(act, why)
        self.tasks_outstanding -= 1
        self.task_info[idx][1] = True
        self.last = _new_step(Step, (act, worker, idx, kind))
        if kind is _EXHAUSTED:
            # The spec keeps the exhaustion in its slot until MainMarkWorkerUnavailable drops it.
            self.exhausted_worker, self.exhausted_task = worker, idx
            self.ended_payloads[worker] = payload
            self.alarm = self._alarmed()
            return
        self._results[idx] = (kind, payload)
        if not self.in_order:
            self._ready = idx

    def mark_worker_as_unavailable(self, worker: int) -> bool:
        """MainMarkWorkerUnavailable: retire a worker whose shard ran dry.

        Drops the exhaustion's slot. Tasks still queued to the worker are dropped by it
        (WorkerSkipIndex); ``skip_exhausted`` retires their slots when ``rcvd_idx`` gets there.
        Returns whether the None sentinel goes to the worker now (not with persistent workers:
        they wait for the next epoch).
        """
        act = Action.MAIN_MARK_WORKER_UNAVAILABLE
        self._target(act)
        self._check(act, _mark_guard(self, worker))
        task = self.exhausted_task
        del self.task_info[task]
        self.exhausted_worker = None
        self.alarm = self._alarmed()
        self.workers_status[worker] = False
        self._put_budget += 1  # torch tries a put after retiring a worker
        self.last = Step(act, worker, task)
        if self.persistent_workers:
            return False
        self.sentinel_sent[worker] = True
        return True

    def process_data(self) -> Delivery:
        """MainProcessData: hand out the next result (rcvd_idx's, or any with in_order=False)."""
        act = _PROCESS
        self._target(act)
        why = _process_guard(self)
        if why is not None:
            raise self._violation(act, why)
        idx = self._hand_out_idx()
        self._ready = None
        worker, _ = self.task_info.pop(idx)
        kind, payload = self._results.pop(idx)
        if idx == self.rcvd_idx:
            self.rcvd_idx += 1
        self._count_handed(idx, worker)
        self.workers_num_tasks[worker] -= 1
        self._put_budget += 1  # torch tries a put after each hand-out
        self.in_call = False  # next() returns (the refill after it is between calls)
        if self.request is _NEXT:
            self.request = _REFILL
        self.last = _new_step(Step, (act, worker, idx, kind))
        return _new_step(Delivery, (idx, worker, kind, payload))

    def _count_handed(self, idx: int, worker: int) -> None:
        """Record a hand-out for checkpoints (``handed_out``)."""
        self.handed_per_worker[worker] += 1
        self.last_handed_worker = worker
        if idx != self.handed_below:
            self.handed_above.add(idx)
            return
        below = idx + 1
        above = self.handed_above
        while below in above:
            above.discard(below)
            below += 1
        self.handed_below = below

    def handed_out(self) -> tuple[int, list[int]]:
        """The tasks of this epoch handed out to the user, whatever is buffered, in flight or
        queued (CheckpointIsHandedOut): ``(handed_below, sorted handed_above)``."""
        return self.handed_below, sorted(self.handed_above)

    # ------------------------------------------------------ the user's checkpoint ----------
    def state_dict(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """UserStateDict (spec/DataLoaderCheckpoint.tla): the user took a state of this
        iterator's epoch, ``checkpoint`` (``checkpoint.trace_checkpoint`` of what the loader
        made of ``handed_out()``). To DataLoader.tla a stuttering step: nothing here changes.
        Its record (``loop.take``) carries the state with this post-state, and trace-check
        compares the state with the hand-outs of its run (CheckpointIsHandedOut). Returns
        ``checkpoint``."""
        return checkpoint

    def skip_exhausted(self) -> int:
        """MainSkipExhausted: step rcvd_idx over a retired or handed-out slot; returns the slot."""
        act = Action.MAIN_SKIP_EXHAUSTED
        self._target(act)
        self._check(act, _skip_guard(self))
        task = self.rcvd_idx
        if self.task_info.pop(task, None) is not None:
            # A retired worker's task: it will never answer, so it is no longer outstanding.
            self.tasks_outstanding -= 1
        self.rcvd_idx += 1
        self.last = Step(act, None, task)
        return task

    def stop_iteration(self) -> bool:
        """MainStopIteration: nothing is left. Returns whether shutdown was decided now."""
        act = Action.MAIN_STOP_ITERATION
        target = self._target(act)
        self._check(act, _stop_guard(self))
        decide = not self.persistent_workers and not self.shutdown
        self.phase = target
        self.in_call = False
        if decide:
            self._decide_shutdown()
        self.last = Step(act)
        return decide

    # ------------------------------------------------------------ faults --------------------
    def detect_worker_failure(self) -> Failure:
        """MainDetectWorkerFailure: workers ended that the iterator depends on. Fail-stop."""
        act = Action.MAIN_DETECT_WORKER_FAILURE
        target = self._target(act)
        self._check(act, _detect_guard(self))
        dead = self.dead_dependencies()
        self.last = Step(act, dead[0])  # the spec reports one; the error names them all
        return self._fail_stop(target, Failure(act, tuple(dead)))

    def detect_pin_failure(self) -> Failure:
        """MainDetectPinFailure: the pin-memory thread died (and everything it passed on before
        was read). Fail-stop."""
        act = Action.MAIN_DETECT_PIN_FAILURE
        target = self._target(act)
        self._check(act, _detect_pin_guard(self))
        self.last = Step(act)
        return self._fail_stop(target, Failure(act, (), self.pin_dead or ""))

    def timeout(self) -> Failure:
        """MainTimeout: nothing arrived within ``timeout`` seconds while waiting. Fail-stop.
        Not while a worker the iterator depends on is known dead: that death is reported."""
        act = Action.MAIN_TIMEOUT
        target = self._target(act)
        self._check(act, _timeout_guard(self))
        self.last = Step(act)
        return self._fail_stop(target, Failure(act))

    def recv_error(self, worker: int, detail: str = "") -> Failure:
        """FaultRecvError: reading a result of ``worker`` failed (it arrived whole but cannot be
        rebuilt here): the result is lost, and a later next() would wait for it for ever.
        Fail-stop. Logged by the main process, which saw it, with its post-state."""
        act = Action.FAULT_RECV_ERROR
        target = self._target(act)
        self._check(act, _recv_guard(self, worker))
        self.last = Step(act, worker)
        return self._fail_stop(target, Failure(act, (worker,), detail))

    def _fail_stop(self, target: Phase, failure: Failure) -> Failure:
        """A fatal error: the call raises it, the iterator is FAILED and shuts down."""
        self.phase = target
        self.in_call = False
        self.failure = failure
        self._decide_shutdown()
        return failure

    def drop_iterator(self) -> bool:
        """MainDropIterator: the user let go (del, break, error in the loop, a new epoch).

        Persistent workers survive a break mid-epoch (a later resume starts the next epoch);
        anything else starts the shutdown. Returns whether it did.
        """
        act = Action.MAIN_DROP_ITERATOR
        target = self._target(act)
        self._check(act, _drop_guard(self))
        keep_workers = self.persistent_workers and self.phase is Phase.RUNNING
        self.phase = target
        if not keep_workers:
            self._decide_shutdown()
        self.last = Step(act)
        return not keep_workers

    # --------------------------------------------------- persistent epochs ------------------
    def resume_iteration(self) -> list[int]:
        """MainResumeIteration: a new epoch on the same workers. Returns who gets a resume."""
        act = Action.MAIN_RESUME_ITERATION
        self._check(act, _resume_guard(self))
        target = self._target(act)
        self.epoch += 1
        self._reset_epoch()
        self.resume_pending = set(range(self.num_workers))
        self.phase = target
        self.in_call = True  # iter() waits for the acks (the spec's in_call)
        self.last = Step(act)
        return sorted(self.resume_pending)

    def drain_resume(self, worker: int, kind: Kind, payload: Any = None) -> bool:
        """MainDrainResume: a message during a resume. Old results are dropped (stale epoch).
        An ack's ``payload`` (the dataset's state as the worker began the epoch, opaque here)
        is kept in ``started_payloads``.

        Returns True when the message was a stale result that was dropped. The last ack starts
        the epoch: the request goes on as PREFETCH.
        """
        act = Action.MAIN_DRAIN_RESUME
        self._target(act)
        self._check(act, _drain_guard(self, worker, kind))
        stale = kind is not Kind.RESUME
        if not stale:
            self.started_payloads[worker] = payload
            self.resume_pending.discard(worker)
            if not self.resume_pending:
                self.phase = Phase.RUNNING
                self.in_call = False
                self.request = Request.PREFETCH
        self.last = Step(act, worker, None, kind)
        return stale

    # ---------------------------------------------------------- shutdown --------------------
    def set_pin_done(self) -> None:
        """MainSetPinDone: pin_memory_thread_done_event.set() and the wake-up put."""
        act = Action.MAIN_SET_PIN_DONE
        self.stage = self._stage_target(act)
        self.last = Step(act)

    def join_pin_thread(self) -> None:
        """MainJoinPinThread: the pin thread has exited."""
        act = Action.MAIN_JOIN_PIN_THREAD
        self.stage = self._stage_target(act)
        self.last = Step(act)

    def set_workers_done(self) -> None:
        """MainSetWorkersDone: workers_done_event.set(), after the pin thread is gone."""
        act = Action.MAIN_SET_WORKERS_DONE
        self.stage = self._stage_target(act)
        self.last = Step(act)

    def put_sentinel(self, worker: int) -> None:
        """MainPutSentinel: None into one worker's index queue."""
        act = Action.MAIN_PUT_SENTINEL
        self._stage_target(act)
        self._check(act, _sentinel_guard(self, worker))
        self.sentinel_sent[worker] = True
        self.last = Step(act, worker)

    def terminate_worker(self, worker: int) -> None:
        """MainTerminateWorker: the bounded join ran out; the worker was killed."""
        act = Action.MAIN_TERMINATE_WORKER
        self._stage_target(act)
        self._check(act, _terminate_guard(self, worker))
        self.terminated[worker] = True
        self.last = Step(act, worker)

    def join_worker(self, worker: int) -> None:
        """MainJoinWorker: the worker has exited and is reaped."""
        act = Action.MAIN_JOIN_WORKER
        self._stage_target(act)
        self._check(act, _join_guard(self, worker))
        self.joined[worker] = True
        self.last = Step(act, worker)


# ----------------------------------------------------------------------------------------------
# The spec's guards, each written once: whether the action is enabled with these parameters, as
# None, or the reason it is not (a constant where next_action() asks on every step). The action
# method refuses what its guard refuses (a caller may take any enabled step, as the spec allows);
# next_action() asks the same guard of the step it proposes (PROPOSALS). The phase or stage an
# action needs is the tables' (PHASE_TRANSITIONS, SHUTDOWN_TRANSITIONS), not a guard's.
Guard = Callable[..., str | None]


def _call_guard(core: ProtocolCore) -> str | None:
    return "the main thread is inside a call already" if core.in_call else None


def _put_guard(core: ProtocolCore) -> str | None:
    # The spec's put has no parameter: its worker is NextWorker, a function of the state
    # (next_worker(); None where no worker is eligible), which the method's worker must be.
    if core.sampler_dry:
        return "the sampler ran dry"
    if len(core.task_info) >= core.max_tasks:
        return "prefetch bound reached (the reorder window is full)"
    return None


def _get_guard(core: ProtocolCore, worker: int, idx: int, kind: Kind) -> str | None:
    info = core.task_info.get(idx)
    if info is None or info[0] != worker or info[1]:
        return f"task {idx} is not outstanding at worker {worker}"
    if kind is not _DATA and (kind is _RESUME or not (kind is _ERROR or core.iterable)):
        return f"a {kind.value!r} message is not a result here"
    return None


def _process_guard(core: ProtocolCore) -> str | None:
    # The spec's Buffered(i) /\ MayHandOut(i): with in_order=False any result, as it arrives.
    if core._ready is not None or core.rcvd_idx in core._results:
        return None
    return "no result to hand out is buffered"


def _skip_guard(core: ProtocolCore) -> str | None:
    # The spec's Skippable(rcvd_idx): handed out already, or a retired worker's slot.
    if core.rcvd_idx < core.send_idx:
        info = core.task_info.get(core.rcvd_idx)
        if info is None or (not info[1] and not core.workers_status[info[0]]):
            return None
    return "rcvd_idx's slot is live"


def _mark_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if core.exhausted_worker == worker else f"worker {worker} did not run dry"


def _stop_guard(core: ProtocolCore) -> str | None:
    return None if core.phase is Phase.ENDED or core.nothing_left() else "tasks are pending"


def _detect_guard(core: ProtocolCore) -> str | None:
    # (``ended`` first: no worker ended is the answer on almost every step.)
    return None if core.ended and core.dead_dependencies() else "no dependent worker ended"


def _detect_pin_guard(core: ProtocolCore) -> str | None:
    return None if core.pin_dead is not None else "the pin thread is not known to be dead"


def _timeout_guard(core: ProtocolCore) -> str | None:
    # A death the loader can see wins over the timeout (torch checks its workers first).
    if not core.waits_for_data():
        return "the iterator waits for no result"
    return "a worker it depends on is dead" if core.dead_dependencies() else None


def _recv_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if core.in_call else "nothing is read between calls"


def _resume_guard(core: ProtocolCore) -> str | None:
    if not core.persistent_workers:
        return "workers are not persistent"
    return "the iterator is shut down" if core.shutdown else None


def _drain_guard(core: ProtocolCore, worker: int, kind: Kind) -> str | None:
    # Anything but an ack is a stale result, dropped; an ack comes once from each worker.
    if kind is Kind.RESUME and worker not in core.resume_pending:
        return f"worker {worker} already resumed"
    return None


def _drop_guard(core: ProtocolCore) -> str | None:
    return "the iterator is shut down" if core.shutdown else None


def _sentinel_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if worker in core.needs_sentinel() else f"worker {worker} has its sentinel"


def _terminate_guard(core: ProtocolCore, worker: int) -> str | None:
    if core.needs_sentinel():
        return "sentinels still to send"
    gone = core.joined[worker] or core.terminated[worker]
    return f"worker {worker} already exited" if gone else None


def _join_guard(core: ProtocolCore, worker: int) -> str | None:
    if core.needs_sentinel():
        return "sentinels still to send"
    return f"worker {worker} already joined" if core.joined[worker] else None


GUARDS: dict[Action, Guard] = {
    _A.MAIN_CALL_NEXT: _call_guard,
    _A.MAIN_TRY_PUT_INDEX: _put_guard,
    _A.MAIN_GET_DATA: _get_guard,
    _A.MAIN_PROCESS_DATA: _process_guard,
    _A.MAIN_SKIP_EXHAUSTED: _skip_guard,
    _A.MAIN_MARK_WORKER_UNAVAILABLE: _mark_guard,
    _A.MAIN_STOP_ITERATION: _stop_guard,
    _A.MAIN_DETECT_WORKER_FAILURE: _detect_guard,
    _A.MAIN_DETECT_PIN_FAILURE: _detect_pin_guard,
    _A.MAIN_TIMEOUT: _timeout_guard,
    _A.FAULT_RECV_ERROR: _recv_guard,
    _A.MAIN_RESUME_ITERATION: _resume_guard,
    _A.MAIN_DRAIN_RESUME: _drain_guard,
    _A.MAIN_DROP_ITERATOR: _drop_guard,
    _A.MAIN_PUT_SENTINEL: _sentinel_guard,
    _A.MAIN_TERMINATE_WORKER: _terminate_guard,
    _A.MAIN_JOIN_WORKER: _join_guard,
}


# ----------------------------------------------------------------------------------------------
# How next_action() proposes each action of a row, one of three ways (PROPOSALS):
# * a Step: a parameterless action, whenever its guard holds (or always, with no guard beyond
#   its row's phase or stage);
# * Pick(f): whenever its (parameterless) guard holds, with the parameters ``f`` reads off the
#   state (the hand-out's task, the first dead worker, rcvd_idx's slot);
# * a proposal: torch's policy of *when* it tries the action (the put budget; a wait, and the
#   timeout, only while next() waits for a result), or a choice among parameters the spec
#   leaves free (the first owed sentinel, all joins at once), then the action's guard.
# MainCallNext comes once per next(); on a FAILED iterator it is all there is (the loop raises
# the failure again right after it).
Proposal = Callable[[ProtocolCore], Step | None]


class Pick(NamedTuple):
    """The parameters of an action whose guard holds, read off the state."""

    step: Callable[[ProtocolCore], Step]


def _propose_put(core: ProtocolCore) -> Step | None:
    # torch's policy: prefetch_factor * num_workers puts as an epoch starts, then one per
    # hand-out or retirement; with nothing pending a put is due whatever the budget (NothingLeft
    # holds only once the sampler ran dry).
    if (core._put_budget <= 0 and core.rcvd_idx != core.send_idx) or _put_guard(core):
        return None
    worker = core.next_worker()
    return None if worker is None else _new_step(Step, (_TRY_PUT, worker, core.send_idx, None))


_CALL_STEP = Step(_CALL)
_GET_STEP = Step(_GET)
_DRAIN_STEP = Step(Action.MAIN_DRAIN_RESUME)


def _propose_get(core: ProtocolCore) -> Step | None:
    # Which message arrives is the world's (its guard is asked when it is taken): the main
    # process waits only while next() waits for a result (the spec's WaitsForData).
    return _GET_STEP if core.waits_for_data() else None


def _propose_drain(core: ProtocolCore) -> Step | None:
    # Which message arrives is the world's (its guard is asked when it is taken).
    return _DRAIN_STEP


def _propose_timeout(core: ProtocolCore) -> Step | None:
    # Only once a wait ran out (deadline_passed), and after the detections in every row.
    return Step(Action.MAIN_TIMEOUT) if core.deadline and not _timeout_guard(core) else None


def _propose_mark(core: ProtocolCore) -> Step | None:
    w = core.exhausted_worker
    if w is None or _mark_guard(core, w) is not None:
        return None
    return Step(Action.MAIN_MARK_WORKER_UNAVAILABLE, w, core.exhausted_task)


def _propose_sentinel(core: ProtocolCore) -> Step | None:
    for worker in core.needs_sentinel():  # the first whose guard holds
        if _sentinel_guard(core, worker) is None:
            return Step(Action.MAIN_PUT_SENTINEL, worker)
    return None


def _propose_join(core: ProtocolCore) -> Step | None:
    # One step for all: the workers are joined together, each one's record when it is reaped.
    unjoined = core.unjoined()
    return (
        Step(Action.MAIN_JOIN_WORKER) if unjoined and not _join_guard(core, unjoined[0]) else None
    )


def _process_step(core: ProtocolCore) -> Step:
    idx = core._hand_out_idx()
    return _new_step(Step, (_PROCESS, core.task_info[idx][0], idx, None))


def _detect_step(core: ProtocolCore) -> Step:
    # The spec reports one dead worker; the error names them all.
    return Step(Action.MAIN_DETECT_WORKER_FAILURE, core.dead_dependencies()[0])


def _skip_step(core: ProtocolCore) -> Step:
    return Step(Action.MAIN_SKIP_EXHAUSTED, None, core.rcvd_idx)


PROPOSALS: dict[Action, Step | Pick | Proposal] = {
    _A.MAIN_CALL_NEXT: _CALL_STEP,
    _A.MAIN_TRY_PUT_INDEX: _propose_put,
    _A.MAIN_DETECT_WORKER_FAILURE: Pick(_detect_step),
    _A.MAIN_DETECT_PIN_FAILURE: Step(_A.MAIN_DETECT_PIN_FAILURE),
    _A.MAIN_TIMEOUT: _propose_timeout,
    _A.MAIN_MARK_WORKER_UNAVAILABLE: _propose_mark,
    _A.MAIN_PROCESS_DATA: Pick(_process_step),
    _A.MAIN_SKIP_EXHAUSTED: Pick(_skip_step),
    _A.MAIN_GET_DATA: _propose_get,
    _A.MAIN_STOP_ITERATION: Step(_A.MAIN_STOP_ITERATION),
    _A.MAIN_RESUME_ITERATION: Step(_A.MAIN_RESUME_ITERATION),
    _A.MAIN_DRAIN_RESUME: _propose_drain,
    _A.MAIN_DROP_ITERATOR: Step(_A.MAIN_DROP_ITERATOR),
    _A.MAIN_SET_PIN_DONE: Step(_A.MAIN_SET_PIN_DONE),
    _A.MAIN_JOIN_PIN_THREAD: Step(_A.MAIN_JOIN_PIN_THREAD),
    _A.MAIN_SET_WORKERS_DONE: Step(_A.MAIN_SET_WORKERS_DONE),
    _A.MAIN_PUT_SENTINEL: _propose_sentinel,
    _A.MAIN_JOIN_WORKER: _propose_join,
}


def _holds(core: ProtocolCore) -> None:
    """The guard of an action with none beyond its row."""


# One try of next_action(): what it asks first, and then the step (or what picks its
# parameters) where that was the action's guard; a proposal is asked alone.
_Try = tuple[Callable[[ProtocolCore], Any], Step | None, Callable[[ProtocolCore], Step] | None]


def _try(action: Action) -> _Try:
    proposal = PROPOSALS[action]
    if isinstance(proposal, Step):
        return GUARDS.get(action, _holds), proposal, None
    if isinstance(proposal, Pick):
        return GUARDS[action], None, proposal.step
    return proposal, None, None


# The rows with each action's try in its place (what next_action() walks).
_PROPOSAL_ROWS = {
    request: {phase: tuple(_try(a) for a in row) for phase, row in rows.items()}
    for request, rows in NEXT_ACTIONS.items()
}
_SHUTDOWN_PROPOSAL_ROWS = {
    stage: tuple(_try(a) for a in row) for stage, row in SHUTDOWN_ACTIONS.items()
}
# The actions an event the world reports enables, and nothing else: a worker's death
# (worker_ended), the pin thread's (pin_thread_died), a wait that ran out (deadline_passed), a
# shard that ran dry (its exhaustion message). Until one is reported (ProtocolCore.alarm) their
# guards refuse, so next_action() walks the same rows without them: the same answer, from 4
# fewer guards on each step of a batch.
ALARM_ACTIONS = frozenset(
    {
        _A.MAIN_DETECT_WORKER_FAILURE,
        _A.MAIN_DETECT_PIN_FAILURE,
        _A.MAIN_TIMEOUT,
        _A.MAIN_MARK_WORKER_UNAVAILABLE,
    }
)
_QUIET_ROWS = {
    request: {
        phase: tuple(_try(a) for a in row if a not in ALARM_ACTIONS) for phase, row in rows.items()
    }
    for request, rows in NEXT_ACTIONS.items()
}

# The actions next_action() never answers: they are taken on what the world reports (a worker
# killed at the end of the bounded join; a read that failed, the spec's FaultRecvError, which the
# main process observes itself and takes as its own step).
REPORTED_ACTIONS = frozenset({_A.MAIN_TERMINATE_WORKER, _A.FAULT_RECV_ERROR})
# The core's method of each action it takes that is not a main-process action of the vocabulary
# (``CORE_METHOD``): the fault the main process observes itself.
OBSERVED_FAULT_METHOD: dict[Action, str] = {_A.FAULT_RECV_ERROR: "recv_error"}
