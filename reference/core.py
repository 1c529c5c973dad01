"""The main process's side of the DataLoader protocol, as a pure state machine.

Rules of this file and the three it reads (after h11, whose ``_state.py`` holds the tables and
``_connection.py`` the class that uses them):

* Everything that decides what the main process does next lives in four modules: the states and
  the tables the docs draw (``reference.transitions``), each action's guard
  (``reference.guards``), torch's policy of when an action is tried and the rows
  ``next_action()`` walks, compiled for speed (``reference.proposals``), and here the class that
  holds the state and takes the steps (``ProtocolCore``) with the types it hands out
  (``Failure``, ``Delivery``, ``ProtocolConfig``). They decide when a task is sent and to which
  worker (the initial prefetch, the refill after a hand-out, the StopIteration guard), which
  result is handed out, when the epoch ends, what a worker's death or a timeout means, and the
  order of shutdown. Nothing else in ``reference/`` makes a protocol decision.
* These files do not know processes, pipes, queues, threads, signals or clocks, and import
  nothing that does (not torch). The core never blocks. ``reference/loop.py`` runs it: it asks
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
  ``next_action()`` walks the rows without them (``QUIET_ROWS``): the same answers, with 4
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
  (``put_budget``), which never exceeds the window's room. A try that finds no eligible worker
  keeps its budget for later (torch drops it). ``NothingLeft`` (the StopIteration guard) holds
  only once the sampler ran dry or no worker is active; before that a put is due whatever the
  budget.
* ``task_info[idx] = [worker, buffered]`` for every task sent and not yet handed out or retired;
  buffered results wait in ``results`` until ``rcvd_idx`` reaches them (``in_order=True``), or
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

from dataclasses import dataclass
from typing import Any, NamedTuple

from loaderspec.reference.guards import (
    call_guard,
    detect_guard,
    detect_pin_guard,
    drain_guard,
    drop_guard,
    get_guard,
    join_guard,
    mark_guard,
    process_guard,
    put_guard,
    recv_guard,
    resume_guard,
    sentinel_guard,
    skip_guard,
    stop_guard,
    terminate_guard,
    timeout_guard,
)
from loaderspec.reference.proposals import (
    CALL_STEP,
    PROPOSAL_ROWS,
    QUIET_ROWS,
    SHUTDOWN_PROPOSAL_ROWS,
)
from loaderspec.reference.steps import Kind, ProtocolViolation, Step
from loaderspec.reference.transitions import (
    AFTER_SHUTDOWN,
    FAILURE_NAME,
    ITER_STATE,
    PHASE_TRANSITIONS,
    REQUEST_ACTION,
    SHUTDOWN_TRANSITIONS,
    Decided,
    Phase,
    Request,
    Stage,
)

from loaderspec.vocabulary import Action

_A, _P, _R = Action, Phase, Request
# What every batch's steps compare with, as module names: ``Action.X`` (any enum member read
# off its class) takes 90-135 ns on Python 3.11, a module name next to nothing. The tables,
# guards and rows this class reads on every step are imported as names of this module too
# (``from ... import``): a module name, never an attribute of another module.
_TRY_PUT, _GET, _PROCESS = _A.MAIN_TRY_PUT_INDEX, _A.MAIN_GET_DATA, _A.MAIN_PROCESS_DATA
_CALL = _A.MAIN_CALL_NEXT
_EXHAUSTED = Kind.EXHAUSTED
_RUNNING, _RESUMING, _FAILED = _P.RUNNING, _P.RESUMING, _P.FAILED
_NEXT, _REFILL, _SHUTDOWN = _R.NEXT, _R.REFILL, _R.SHUTDOWN
# Step(...) without NamedTuple's Python-level __new__ (half the cost), for the per-batch steps.
_new_step = tuple.__new__


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
        # without them (QUIET_ROWS), whose guards would all refuse: almost every batch's steps.
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
        self.put_budget = self.max_tasks  # puts torch tries before the next hand-out
        self.results: dict[int, tuple[Kind, Any]] = {}
        self.ready: int | None = None  # in_order=False: the result to hand out now
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
            "iter_state": ITER_STATE[self.phase],
            "in_call": self.in_call,
            "workers_num_tasks": list(self.workers_num_tasks),
            "worker_queue_idx": self.worker_queue_idx,
            "resume_iteration_cnt": len(self.resume_pending),
            "sentinel_sent": list(self.sentinel_sent),
            "failure": "none" if self.failure is None else FAILURE_NAME[self.failure.action],
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
        if self.shutdown and (self.phase, action) not in AFTER_SHUTDOWN:
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
            row = SHUTDOWN_PROPOSAL_ROWS[self.stage]
        else:
            found = (PROPOSAL_ROWS if self.alarm else QUIET_ROWS)[self.request].get(self.phase)
            if found is None:
                why = f"{self.request.value} is asked in phase={self.phase.value}"
                raise self._violation(REQUEST_ACTION[self.request], why)
            row = found
        for ask, step, pick in row:
            if step is not None:  # a parameterless action: its guard
                if ask(self) is None:
                    return step
            elif pick is not None:  # its guard, then its parameters
                if ask(self) is None:
                    return pick(self)
            else:  # a proposal: torch's policy or a choice of parameters, then the guard
                proposed: Step | None = ask(self)  # the row's shape says ask is a Proposal
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

    def hand_out_idx(self) -> int:
        """The task whose result ``process_data`` hands out (once its guard holds): the one just
        arrived with in_order=False, else rcvd_idx's."""
        return self.rcvd_idx if self.ready is None else self.ready

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
        why = call_guard(self)  # (the per-batch methods raise inline: a call less)
        if why is not None:
            raise self._violation(act, why)
        self.phase = target
        self.in_call = target is not _FAILED
        self.last = CALL_STEP

    # ---------------------------------------------------------- dispatch --------------------
    def try_put_index(self, worker: int) -> int:
        """MainTryPutIndex: task ``send_idx`` goes to ``worker``; returns its idx."""
        act = _TRY_PUT
        self._target(act)
        why = put_guard(self)
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
        self.put_budget = max(0, self.put_budget - 1)
        self.last = _new_step(Step, (act, worker, idx, None))
        return idx

    # ----------------------------------------------------------- receive --------------------
    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        """MainGetData: one (idx, result) message of ``worker`` arrived."""
        act = _GET
        self._target(act)
        why = get_guard(self, worker, idx, kind)
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
        self.results[idx] = (kind, payload)
        if not self.in_order:
            self.ready = idx

    def mark_worker_as_unavailable(self, worker: int) -> bool:
        """MainMarkWorkerUnavailable: retire a worker whose shard ran dry.

        Drops the exhaustion's slot. Tasks still queued to the worker are dropped by it
        (WorkerSkipIndex); ``skip_exhausted`` retires their slots when ``rcvd_idx`` gets there.
        Returns whether the None sentinel goes to the worker now (not with persistent workers:
        they wait for the next epoch).
        """
        act = Action.MAIN_MARK_WORKER_UNAVAILABLE
        self._target(act)
        self._check(act, mark_guard(self, worker))
        task = self.exhausted_task
        del self.task_info[task]
        self.exhausted_worker = None
        self.alarm = self._alarmed()
        self.workers_status[worker] = False
        self.put_budget += 1  # torch tries a put after retiring a worker
        self.last = Step(act, worker, task)
        if self.persistent_workers:
            return False
        self.sentinel_sent[worker] = True
        return True

    def process_data(self) -> Delivery:
        """MainProcessData: hand out the next result (rcvd_idx's, or any with in_order=False)."""
        act = _PROCESS
        self._target(act)
        why = process_guard(self)
        if why is not None:
            raise self._violation(act, why)
        idx = self.hand_out_idx()
        self.ready = None
        worker, _ = self.task_info.pop(idx)
        kind, payload = self.results.pop(idx)
        if idx == self.rcvd_idx:
            self.rcvd_idx += 1
        self._count_handed(idx, worker)
        self.workers_num_tasks[worker] -= 1
        self.put_budget += 1  # torch tries a put after each hand-out
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
        self._check(act, skip_guard(self))
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
        self._check(act, stop_guard(self))
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
        self._check(act, detect_guard(self))
        dead = self.dead_dependencies()
        self.last = Step(act, dead[0])  # the spec reports one; the error names them all
        return self._fail_stop(target, Failure(act, tuple(dead)))

    def detect_pin_failure(self) -> Failure:
        """MainDetectPinFailure: the pin-memory thread died (and everything it passed on before
        was read). Fail-stop."""
        act = Action.MAIN_DETECT_PIN_FAILURE
        target = self._target(act)
        self._check(act, detect_pin_guard(self))
        self.last = Step(act)
        return self._fail_stop(target, Failure(act, (), self.pin_dead or ""))

    def timeout(self) -> Failure:
        """MainTimeout: nothing arrived within ``timeout`` seconds while waiting. Fail-stop.
        Not while a worker the iterator depends on is known dead: that death is reported."""
        act = Action.MAIN_TIMEOUT
        target = self._target(act)
        self._check(act, timeout_guard(self))
        self.last = Step(act)
        return self._fail_stop(target, Failure(act))

    def recv_error(self, worker: int, detail: str = "") -> Failure:
        """FaultRecvError: reading a result of ``worker`` failed (it arrived whole but cannot be
        rebuilt here): the result is lost, and a later next() would wait for it for ever.
        Fail-stop. Logged by the main process, which saw it, with its post-state."""
        act = Action.FAULT_RECV_ERROR
        target = self._target(act)
        self._check(act, recv_guard(self, worker))
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
        self._check(act, drop_guard(self))
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
        self._check(act, resume_guard(self))
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
        self._check(act, drain_guard(self, worker, kind))
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
        self._check(act, sentinel_guard(self, worker))
        self.sentinel_sent[worker] = True
        self.last = Step(act, worker)

    def terminate_worker(self, worker: int) -> None:
        """MainTerminateWorker: the bounded join ran out; the worker was killed."""
        act = Action.MAIN_TERMINATE_WORKER
        self._stage_target(act)
        self._check(act, terminate_guard(self, worker))
        self.terminated[worker] = True
        self.last = Step(act, worker)

    def join_worker(self, worker: int) -> None:
        """MainJoinWorker: the worker has exited and is reaped."""
        act = Action.MAIN_JOIN_WORKER
        self._stage_target(act)
        self._check(act, join_guard(self, worker))
        self.joined[worker] = True
        self.last = Step(act, worker)
