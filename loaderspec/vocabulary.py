"""The shared vocabulary of loaderspec: spec actions, spec properties, and their levels.

One name, four places (docs/STYLE): a spec action ``MainTryPutIndex`` is the TLA+ action of that
name in ``spec/DataLoader.tla``, the ``Action`` member whose value is that name, the reference
core's method (torch's name where one exists, given in ``CORE_METHOD``), the ``"action"`` field of
a trace record, and ``MainTryPutIndexIfLogged`` in ``spec/TraceDataLoader.tla``. Properties are
named as claims (``PropertyName``); each conformance case is marked with one of their values.

This module must not import torch, the reference loader or the conformance suite: all of them
import it. Tests in ``tests/`` fail when these names and ``spec/`` drift apart.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Actor(enum.Enum):
    """Who takes a step. The prefix of every action name."""

    MAIN = "Main"  # the iterator in the loader's process (torch's _MultiProcessingDataLoaderIter)
    WORKER = "Worker"  # one worker process (torch's _worker_loop)
    PIN = "Pin"  # the pin-memory thread of the loader's process (torch's _pin_memory_loop)
    FAULT = "Fault"  # the environment: signals, hangs and errors nobody asked for
    USER = "User"  # the loader's caller: checkpoint and resume (UserAction)


class Action(enum.Enum):
    """Every step of the protocol. Values are the TLA+ action names in ``spec/DataLoader.tla``.

    Members are singletons compared by identity, so they hash by identity too: ``Enum.__hash__``
    is a Python function (hash of the name), and actions key the tables the reference's core
    and loop read at every step of every batch.
    """

    __hash__ = object.__hash__

    # --- main process: the user's call, the prefetch / reorder loop (torch: _next_data) ---------
    MAIN_CALL_NEXT = "MainCallNext"  # the user calls next(): a call begins (it reads, then returns)
    MAIN_TRY_PUT_INDEX = "MainTryPutIndex"  # send task send_idx to the next active worker
    MAIN_GET_DATA = "MainGetData"  # take one (idx, data) message off the data queue
    MAIN_PROCESS_DATA = "MainProcessData"  # hand out task rcvd_idx (any, in_order=False); reraise
    MAIN_SKIP_EXHAUSTED = "MainSkipExhausted"  # step rcvd_idx over a retired worker's empty slot
    MAIN_MARK_WORKER_UNAVAILABLE = "MainMarkWorkerUnavailable"  # retire a worker after exhaustion
    MAIN_STOP_ITERATION = "MainStopIteration"  # nothing left: raise StopIteration
    MAIN_DETECT_WORKER_FAILURE = "MainDetectWorkerFailure"  # a worker died: raise RuntimeError
    MAIN_DETECT_PIN_FAILURE = "MainDetectPinFailure"  # the pin thread died: raise RuntimeError
    MAIN_TIMEOUT = "MainTimeout"  # `timeout` expired with nothing received: raise RuntimeError
    MAIN_RESUME_ITERATION = "MainResumeIteration"  # persistent workers: new epoch, send resume
    MAIN_DRAIN_RESUME = "MainDrainResume"  # read resume acks, dropping the old epoch's results
    MAIN_DROP_ITERATOR = "MainDropIterator"  # the user breaks off: del, break, error in the loop
    # --- main process: shutdown, in the seeds' order (torch: _shutdown_workers) -----------------
    MAIN_SET_PIN_DONE = "MainSetPinDone"  # pin done event + (None, None) wake-up put
    MAIN_JOIN_PIN_THREAD = "MainJoinPinThread"  # the pin thread has exited; join returns
    MAIN_SET_WORKERS_DONE = "MainSetWorkersDone"  # workers_done_event.set()
    MAIN_PUT_SENTINEL = "MainPutSentinel"  # None into one worker's index queue
    MAIN_JOIN_WORKER = "MainJoinWorker"  # one worker has exited; join returns
    MAIN_TERMINATE_WORKER = "MainTerminateWorker"  # bounded join timed out: terminate it
    # --- worker processes -----------------------------------------------------------------------
    WORKER_FETCH = "WorkerFetch"  # get (idx, index) and run the fetcher: data, error or exhausted
    WORKER_PUT = "WorkerPut"  # put the fetched (idx, data) on the result queue
    WORKER_ACK_RESUME = "WorkerAckResume"  # _ResumeIteration: acknowledge, rebuild the fetcher
    WORKER_SKIP_INDEX = "WorkerSkipIndex"  # done event set or iteration ended: drop the index
    WORKER_EXIT = "WorkerExit"  # got the None sentinel: exit cleanly
    WORKER_WATCHDOG_EXIT = "WorkerWatchdogExit"  # the parent is gone: exit on our own
    # --- pin-memory thread ----------------------------------------------------------------------
    PIN_GET_RESULT = "PinGetResult"  # take one result off the worker result queue and pin it
    PIN_PUT_DATA = "PinPutData"  # put it on the data queue the main process reads
    PIN_EXIT = "PinExit"  # the pin done event is set: the thread ends
    # --- faults (each switchable by a constant of the model) ------------------------------------
    FAULT_KILL_WORKER = "FaultKillWorker"  # SIGKILL of one worker at any point
    FAULT_KILL_PARENT = "FaultKillParent"  # SIGKILL of the loader's process
    FAULT_HANG_WORKER = "FaultHangWorker"  # a fetch that never returns
    FAULT_FETCH_ERROR = "FaultFetchError"  # the dataset/collate raises: an ExceptionWrapper result
    FAULT_PUT_ERROR = "FaultPutError"  # a worker's result cannot be sent (it does not pickle)
    FAULT_RECV_ERROR = "FaultRecvError"  # the main process's read of a result fails
    FAULT_PIN_DEATH = "FaultPinDeath"  # the pin thread dies (an exception escapes its loop)

    @property
    def actor(self) -> Actor:
        """The actor whose step this is, read off the name's prefix."""
        for actor in Actor:
            if self.value.startswith(actor.value):
                return actor
        raise AssertionError(f"action {self.value} has no actor prefix")  # pragma: no cover


# The reference core's method for each action that the main process (the pure core) takes.
# torch's name where torch has one; worker, pin and fault actions live in the IO shell.
CORE_METHOD: dict[Action, str] = {
    Action.MAIN_CALL_NEXT: "call_next",
    Action.MAIN_TRY_PUT_INDEX: "try_put_index",
    Action.MAIN_GET_DATA: "get_data",
    Action.MAIN_PROCESS_DATA: "process_data",
    Action.MAIN_SKIP_EXHAUSTED: "skip_exhausted",
    Action.MAIN_MARK_WORKER_UNAVAILABLE: "mark_worker_as_unavailable",
    Action.MAIN_STOP_ITERATION: "stop_iteration",
    Action.MAIN_DETECT_WORKER_FAILURE: "detect_worker_failure",
    Action.MAIN_DETECT_PIN_FAILURE: "detect_pin_failure",
    Action.MAIN_TIMEOUT: "timeout",
    Action.MAIN_RESUME_ITERATION: "resume_iteration",
    Action.MAIN_DRAIN_RESUME: "drain_resume",
    Action.MAIN_DROP_ITERATOR: "drop_iterator",
    Action.MAIN_SET_PIN_DONE: "set_pin_done",
    Action.MAIN_JOIN_PIN_THREAD: "join_pin_thread",
    Action.MAIN_SET_WORKERS_DONE: "set_workers_done",
    Action.MAIN_PUT_SENTINEL: "put_sentinel",
    Action.MAIN_JOIN_WORKER: "join_worker",
    Action.MAIN_TERMINATE_WORKER: "terminate_worker",
}


class Level(enum.Enum):
    """How binding a property is (RFC 2119). A conformance report grades against it."""

    MUST = "MUST"  # violated: FAIL
    SHOULD = "SHOULD"  # violated while every MUST holds: NON-STRICT


class Check(enum.Enum):
    """How a property is checked: by TLC (which cfg section), or by the conformance suite."""

    INVARIANT = "invariant"  # a state predicate (cfg INVARIANT)
    TEMPORAL = "temporal"  # a temporal formula (cfg PROPERTY), under the spec's fairness
    DEADLOCK = "deadlock"  # TLC's built-in deadlock check
    MEASURED = "measured"  # wall-clock bounds: the conformance suite's clocks, not TLC
    SUITE = "suite"  # many ranks at once: checked by the conformance suite, not modelled


class PropertyName(enum.Enum):
    """Every property of the spec. Values are the TLA+ definition names in spec/DataLoader.tla
    (and what a conformance case's ``spec_property`` marker names)."""

    TYPE_OK = "TypeOK"
    IN_ORDER_DELIVERY = "InOrderDelivery"
    NO_DUPLICATE_DELIVERY = "NoDuplicateDelivery"
    EXACTLY_ONCE = "ExactlyOnce"
    NO_SILENT_LOSS = "NoSilentLoss"
    PREFETCH_BOUND = "PrefetchBound"
    NO_DELIVERY_AFTER_SHUTDOWN = "NoDeliveryAfterShutdown"
    NO_STALE_EPOCH_DELIVERY = "NoStaleEpochDelivery"
    PIN_THREAD_EXITS_FIRST = "PinThreadExitsFirst"
    NO_DEADLOCK = "NoDeadlock"
    ITERATION_TERMINATES = "IterationTerminates"
    WORKER_DEATH_RAISES = "WorkerDeathRaises"
    SHUTDOWN_COMPLETES = "ShutdownCompletes"
    NO_ORPHAN_WORKERS = "NoOrphanWorkers"
    FAIL_STOP_AFTER_FATAL_ERROR = "FailStopAfterFatalError"
    PROMPT_FAULT_HANDLING = "PromptFaultHandling"
    NO_DISPATCH_AFTER_END = "NoDispatchAfterEnd"
    NO_FETCH_AFTER_DONE = "NoFetchAfterDone"
    SHUTDOWN_ORDER = "ShutdownOrder"
    FATAL_ERROR_SHUTS_DOWN = "FatalErrorShutsDown"
    JOIN_AFTER_SENTINELS = "JoinAfterSentinels"
    # issue 38: the designs every model accepted
    STOP_ITERATION_AFTER_SHUTDOWN = "StopIterationAfterShutdown"
    NO_TASK_TO_RETIRED_WORKER = "NoTaskToRetiredWorker"
    PREFETCH_WINDOW_FILLS = "PrefetchWindowFills"
    # the MUST beside FatalErrorShutsDown: what workers left running after a fatal error hold
    NO_WORKER_OUTLIVES_FAILURE = "NoWorkerOutlivesFailure"
    # spec/DataLoaderCheckpoint.tla (CHECKPOINT_PROPERTIES): checkpoint and resume (issue 19)
    RESUME_EQUIVALENCE = "ResumeEquivalence"
    CHECKPOINT_IS_HANDED_OUT = "CheckpointIsHandedOut"
    SNAPSHOT_IS_IMMUTABLE = "SnapshotIsImmutable"
    LOAD_IS_NEVER_IGNORED = "LoadIsNeverIgnored"
    RESUME_ADVANCES = "ResumeAdvances"
    RESUME_TOPOLOGY_EXPLICIT = "ResumeTopologyExplicit"
    # issue 35: the state is what the user received; no stall after a resume; map-style any count
    CHECKPOINT_IS_RECEIVED = "CheckpointIsReceived"
    RESUME_NEVER_STALLS = "ResumeNeverStalls"
    MAP_RESUME_ANY_WORKERS = "MapResumeAnyWorkers"
    # issue 36: the order is drawn from the user's generator alone
    ORDER_FROM_USER_GENERATOR = "OrderFromUserGenerator"
    # RANK_PROPERTIES: many ranks of a torch.distributed group, one loader each (the suite's only)
    RANKS_PARTITION_EVERY_EPOCH = "RanksPartitionEveryEpoch"
    RANKS_EVEN_BATCH_COUNTS = "RanksEvenBatchCounts"
    RANKS_SHARE_EPOCH_PERMUTATION = "RanksShareEpochPermutation"


@dataclass(frozen=True)
class Property:
    """A claim of the spec, as TLC checks it and as the conformance suite grades it."""

    prop: PropertyName
    level: Level
    check: Check
    claim: str  # one sentence: what a correct loader guarantees
    module: str | None = "DataLoader"  # the spec module (spec/<module>.tla); None: no formula
    # Spec-only: why no conformance case grades it yet (TLC checks it on the models, and every
    # broken variant of the manifest that breaks it); empty: the suite has its file of cases.
    spec_only: str = ""

    @property
    def name(self) -> str:
        """The TLA+ definition name in spec/<module>.tla."""
        return self.prop.value

    @property
    def modelled(self) -> bool:
        """Whether a spec module states it as a formula TLC checks (a measured bound, or a
        property of many ranks, is graded by the conformance suite only)."""
        return self.check not in (Check.MEASURED, Check.SUITE)


P = PropertyName
PROPERTIES: tuple[Property, ...] = (
    Property(P.TYPE_OK, Level.MUST, Check.INVARIANT, "Every variable holds a value of its type."),
    Property(
        P.IN_ORDER_DELIVERY,
        Level.MUST,
        Check.INVARIANT,
        "With in_order=True, batches are handed out in sampler order.",
    ),
    Property(
        P.NO_DUPLICATE_DELIVERY,
        Level.MUST,
        Check.INVARIANT,
        "No task is handed out twice within an epoch, in either ordering mode.",
    ),
    Property(
        P.EXACTLY_ONCE,
        Level.MUST,
        Check.INVARIANT,
        "An epoch that ends in StopIteration has handed out every task once, and an"
        " IterableDataset epoch ends only once every worker's shard has ended.",
    ),
    Property(
        P.NO_SILENT_LOSS,
        Level.MUST,
        Check.INVARIANT,
        "No task is passed over: every task before the one handed out (or StopIteration) was"
        " handed out, as its batch or its error, or retired by its worker's exhaustion; and"
        " nothing the epoch waits for (a task, its result, a resume acknowledgement) is lost on"
        " its way unless whoever held it died: a timeout does not excuse a loss.",
    ),
    Property(
        P.PREFETCH_BOUND,
        Level.MUST,
        Check.INVARIANT,
        "At most prefetch_factor * num_workers batches are loaded ahead (fetched and not yet"
        " handed out) at any time, counted wherever they are, whatever their epoch or task.",
    ),
    Property(
        P.NO_DELIVERY_AFTER_SHUTDOWN,
        Level.MUST,
        Check.INVARIANT,
        "Nothing is handed out after StopIteration or a break until a new iter() starts the next"
        " epoch: next() after the end raises StopIteration again.",
    ),
    Property(
        P.NO_STALE_EPOCH_DELIVERY,
        Level.MUST,
        Check.INVARIANT,
        "A batch fetched for an earlier epoch is never handed out in a later one.",
    ),
    Property(
        P.PIN_THREAD_EXITS_FIRST,
        Level.SHOULD,
        Check.INVARIANT,
        "At shutdown the pin-memory thread has stopped reading before any worker is told to exit.",
    ),
    Property(
        P.NO_DEADLOCK,
        Level.MUST,
        Check.DEADLOCK,
        "Some step is always possible until the run has ended.",
    ),
    Property(
        P.ITERATION_TERMINATES,
        Level.MUST,
        Check.TEMPORAL,
        "Every next() returns, raises StopIteration or raises an error (never hangs),"
        " unless a worker hangs and no timeout is set.",
    ),
    Property(
        P.WORKER_DEATH_RAISES,
        Level.MUST,
        Check.TEMPORAL,
        "A next() during which a worker it depends on is dead raises an error that is not a"
        " timeout (or returns normally); it never hangs. A death is never hidden: a worker is"
        " retired only by its shard's end or a raised death, and its tasks are never re-sent to"
        " another behind the user's back.",
    ),
    Property(
        P.SHUTDOWN_COMPLETES,
        Level.MUST,
        Check.TEMPORAL,
        "Once shutdown starts, every worker and the pin-memory thread are eventually gone,"
        " stuck and blocked workers included.",
    ),
    Property(
        P.NO_ORPHAN_WORKERS,
        Level.MUST,
        Check.TEMPORAL,
        "After the loader's process dies, every worker exits, busy and blocked ones included.",
    ),
    Property(
        P.FAIL_STOP_AFTER_FATAL_ERROR,
        Level.SHOULD,
        Check.INVARIANT,
        "After next() raised a fatal error (a worker's death, a timeout, a failed read, the pin"
        " thread's death), every later next() raises promptly: no batch, no StopIteration.",
    ),
    Property(
        P.PROMPT_FAULT_HANDLING,
        Level.SHOULD,
        Check.MEASURED,
        "Worker death is reported, shutdown completes and orphans exit within 0.5 s"
        " (torch's 5 s status-check interval is allowed, as NON-STRICT).",
    ),
    Property(
        P.NO_DISPATCH_AFTER_END,
        Level.MUST,
        Check.INVARIANT,
        "Nothing is sent to a worker for an epoch that has ended (StopIteration or a break):"
        " no prefetch outlives its epoch.",
    ),
    Property(
        P.NO_FETCH_AFTER_DONE,
        Level.SHOULD,
        Check.INVARIANT,
        "After workers_done_event is set, no worker takes a new index to fetch: it only waits"
        " for its sentinel.",
    ),
    Property(
        P.SHUTDOWN_ORDER,
        Level.SHOULD,
        Check.INVARIANT,
        "Shutdown runs in the NOTE's order: the pin thread joined only once it has ended, and"
        " before the workers are told; the workers' done event before any sentinel.",
        spec_only="the order of steps inside one process (a join, an event, a sentinel) is not"
        " seen from outside the loader; trace-check holds the reference's traces to it",
    ),
    Property(
        P.FATAL_ERROR_SHUTS_DOWN,
        Level.SHOULD,
        Check.INVARIANT,
        "Once next() has raised a fatal error, the iterator has started its shutdown: its"
        " workers do not live on until the iterator is dropped.",
    ),
    Property(
        P.JOIN_AFTER_SENTINELS,
        Level.SHOULD,
        Check.INVARIANT,
        "The workers are joined only after every sentinel is put: no healthy worker waits out"
        " the join's timeout and is terminated.",
        spec_only="the order of steps inside one process (the sentinels, then the joins) is not"
        " seen from outside the loader; trace-check holds the reference's traces to it",
    ),
    Property(
        P.STOP_ITERATION_AFTER_SHUTDOWN,
        Level.MUST,
        Check.INVARIANT,
        "A non-persistent iterator's StopIteration reaches the user only once its workers and"
        " its pin-memory thread are joined (torch shuts them down before it raises).",
        spec_only="no conformance case grades it yet (issue 38); trace-check holds the"
        " reference's traces to it",
    ),
    Property(
        P.NO_TASK_TO_RETIRED_WORKER,
        Level.MUST,
        Check.INVARIANT,
        "No task is sent to a worker that the epoch retired after its shard ended.",
        spec_only="which worker a task went to is not seen from outside the loader; trace-check"
        " holds the reference's traces to it",
    ),
    Property(
        P.PREFETCH_WINDOW_FILLS,
        Level.SHOULD,
        Check.TEMPORAL,
        "Between calls, while the sampler has indices and a worker can take one, tasks are sent"
        " until prefetch_factor * num_workers are out: the window fills, not only stays under"
        " its bound.",
        spec_only="no conformance case grades it yet (issue 38); TLC checks it on every liveness"
        " model",
    ),
    Property(
        P.NO_WORKER_OUTLIVES_FAILURE,
        Level.MUST,
        Check.TEMPORAL,
        "The workers of an iterator that failed (every later next() raises) are eventually gone,"
        " though the user keeps the iterator: they do not hold their processes, shared memory"
        " and fetched batches for nobody until it is dropped.",
        spec_only="'eventually' has no bound a finite run can grade: the suite grades the"
        " workers still alive 6 s after the error as FatalErrorShutsDown"
        " (test_fatal_error_shuts_down.py); TLC checks it on every liveness model",
    ),
)

# Checkpoint and resume (issue 19): spec/DataLoaderCheckpoint.tla, the user's state_dict() and
# load_state_dict() over the iterator's handed-out history. Kept apart from PROPERTIES, whose
# every member spec/DataLoader.tla defines and every DataLoader model checks.
CHECKPOINT_MODULE = "DataLoaderCheckpoint"
CHECKPOINT_PROPERTIES: tuple[Property, ...] = (
    Property(
        P.RESUME_EQUIVALENCE,
        Level.MUST,
        Check.INVARIANT,
        "What was handed out before a checkpoint followed by what the resumed loader hands out"
        " is what an uninterrupted run hands out: the same sequence with in_order=True, the"
        " same multiset per epoch otherwise.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.CHECKPOINT_IS_HANDED_OUT,
        Level.MUST,
        Check.INVARIANT,
        "A state counts exactly the batches handed out, whatever is buffered, in flight or"
        " queued (and an epoch that raised StopIteration as over).",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.SNAPSHOT_IS_IMMUTABLE,
        Level.MUST,
        Check.INVARIANT,
        "A state, once returned by state_dict(), never changes.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.LOAD_IS_NEVER_IGNORED,
        Level.MUST,
        Check.INVARIANT,
        "A loaded state governs the next iter(), whatever was called before it (iter(),"
        " state_dict(), live persistent workers), or the load raises.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.RESUME_ADVANCES,
        Level.MUST,
        Check.INVARIANT,
        "A state taken after a resume is later than the one loaded, and every epoch after the"
        " resumed one is whole.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.RESUME_TOPOLOGY_EXPLICIT,
        Level.SHOULD,
        Check.INVARIANT,
        "Resuming with another num_workers continues exactly, or raises a ValueError naming"
        " both counts; never an assert, never a silent wrong stream.",
        CHECKPOINT_MODULE,
    ),
    # issue 35
    Property(
        P.CHECKPOINT_IS_RECEIVED,
        Level.MUST,
        Check.INVARIANT,
        "A state, when returned, is what the user received: the user's epoch and the batches"
        " next() returned in it, whatever the loader's own count of them says.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.RESUME_NEVER_STALLS,
        Level.MUST,
        Check.INVARIANT,
        "A resumed iterator never waits for a batch its state said was handed out: it can"
        " always hand out, send or end its epoch without a timeout ending the wait.",
        CHECKPOINT_MODULE,
    ),
    Property(
        P.MAP_RESUME_ANY_WORKERS,
        Level.SHOULD,
        Check.INVARIANT,
        "A map-style state is accepted by a loader with another num_workers, and continues"
        " exactly (its sampler order does not depend on the worker count).",
        CHECKPOINT_MODULE,
    ),
    # issue 36
    Property(
        P.ORDER_FROM_USER_GENERATOR,
        Level.MUST,
        Check.INVARIANT,
        "A shuffled epoch's order is drawn from the generator the loader was given, and from it"
        " alone: two runs from equal generator states hand out the same order, another state"
        " another one, and reseeding or advancing torch's global RNG changes none.",
        CHECKPOINT_MODULE,
    ),
)

# Many ranks (issue 20): properties of a loader run on every rank of a torch.distributed group,
# which the spec (one loader process, no payloads) does not model: the conformance suite grades
# them on a real gloo group (conformance.harness.ranks); no formula, no broken variant.
RANK_PROPERTIES: tuple[Property, ...] = (
    Property(
        P.RANKS_PARTITION_EVERY_EPOCH,
        Level.MUST,
        Check.SUITE,
        "On every rank of a process group, each epoch hands out exactly the items of that rank's"
        " DistributedSampler (or iterable shard): across ranks every item once, padding apart.",
        None,
    ),
    Property(
        P.RANKS_EVEN_BATCH_COUNTS,
        Level.MUST,
        Check.SUITE,
        "Every rank hands out the same number of batches each epoch, so a collective per step"
        " (DDP's all_reduce) never leaves one rank waiting for the others.",
        None,
    ),
    Property(
        P.RANKS_SHARE_EPOCH_PERMUTATION,
        Level.MUST,
        Check.SUITE,
        "After sampler.set_epoch(e) every rank hands out its sampler's order for epoch e: the"
        " ranks cut one permutation per epoch, a new one each epoch.",
        None,
    ),
)
del P

# The user's calls in spec/DataLoaderCheckpoint.tla, each the loader method of that name.
# UserIter's record is the iterator's Config header (its ``start``: the state it began from).
CHECKPOINT_ACTIONS: dict[str, str] = {
    "UserIter": "__iter__",
    "UserStateDict": "state_dict",
    "UserLoadStateDict": "load_state_dict",
}


class UserAction(enum.Enum):
    """The user's checkpoint calls that are trace records (docs/checkpoint.md, "Traced"): a spec
    action of ``spec/DataLoaderCheckpoint.tla``, a loader method (``CHECKPOINT_ACTIONS``), the
    protocol core's method where a live iterator takes it (``USER_CORE_METHOD``), a record of
    ``RecordType.USER`` and ``<Action>IfLogged`` in ``spec/TraceDataLoader.tla``. Kept apart from
    ``Action``, whose every member is a step of ``spec/DataLoader.tla``: to DataLoader.tla's
    variables these are stuttering steps."""

    __hash__ = object.__hash__

    USER_STATE_DICT = "UserStateDict"  # state_dict(): what was handed out (CheckpointIsHandedOut)
    USER_LOAD_STATE_DICT = "UserLoadStateDict"  # load_state_dict(s): s governs the next iter()

    @property
    def actor(self) -> Actor:
        return Actor.USER


def traced_action(name: str) -> Action | UserAction:
    """The ``Action`` or ``UserAction`` a record's ``action`` names.

    Raises:
        ValueError: no action of either vocabulary has that name.
    """
    try:
        return Action(name)
    except ValueError:
        return UserAction(name)


# The protocol core's method of each user action a live iterator takes (the core counts the
# hand-outs a state describes). A load has no iterator: it governs the next one, whose run its
# record opens, and the loader writes it (reference/loader.py), as it does a state_dict()
# taken while no iterator is live.
USER_CORE_METHOD: dict[UserAction, str] = {UserAction.USER_STATE_DICT: "state_dict"}

ALL_PROPERTIES: tuple[Property, ...] = PROPERTIES + CHECKPOINT_PROPERTIES + RANK_PROPERTIES
PROPERTY_NAMES: frozenset[str] = frozenset(p.name for p in ALL_PROPERTIES)


def module_properties(module: str) -> tuple[Property, ...]:
    """The properties spec/<module>.tla defines (DataLoader's include TypeOK; so do the
    checkpoint module's, which also defines its own TypeOK)."""
    if module == CHECKPOINT_MODULE:
        return (property_named("TypeOK"), *CHECKPOINT_PROPERTIES)
    return tuple(p for p in ALL_PROPERTIES if p.module == module)


def property_named(name: str | PropertyName) -> Property:
    """Look a property up by its spec name (or its ``PropertyName``).

    Raises:
        KeyError: naming the unknown property and listing the known ones.
    """
    value = name.value if isinstance(name, PropertyName) else name
    for prop in ALL_PROPERTIES:
        if prop.name == value:
            return prop
    known = ", ".join(sorted(PROPERTY_NAMES))
    raise KeyError(f"unknown spec property {name!r}; spec/ defines: {known}")


# ---------------------------------------------------------------------------------------------
# Environment variables and the trace record schema (docs/architecture.md "Trace records",
# docs/contracts.md). The trace writer (``loaderspec.tracewriter``), the reference loader,
# faultinject's ``Fault*`` records and trace-check name fields and variables only through these.

TRACE_DIR_ENV = "LOADERSPEC_TRACE_DIR"  # a directory: each process appends to its TRACE_FILE
FORCE_PIN_THREAD_ENV = "LOADERSPEC_FORCE_PIN_THREAD"  # "1": a pin thread without an accelerator
CACHE_DIR_ENV = "LOADERSPEC_CACHE_DIR"  # where loaderspec.fakeaccel caches its build

TRACE_FILE = "trace-{pid}.jsonl"  # one file per process, in the trace directory
TRACE_GLOB = "trace-*.jsonl"
CONFIG_ACTION = "Config"  # the action of an iterator's header record (not a spec action)


class RecordType(enum.Enum):
    """The four shapes of a trace record."""

    STEP = "step"  # a spec action of the main process, a worker or the pin thread
    FAULT = "fault"  # a Fault* action, written by whoever injects it, just before
    CONFIG = "config"  # an iterator's header: the model constants its run follows
    USER = "user"  # a UserAction: the checkpoint returned or loaded (docs/checkpoint.md)


# The fields of each record type, in the order they are written. ``kind``, ``origin``,
# ``victim`` and ``user`` are written only on records that have one (docs/contracts.md lists
# them).
_HEAD = ("t", "pid", "actor", "action")
RECORD_FIELDS: dict[RecordType, tuple[str, ...]] = {
    RecordType.STEP: (*_HEAD, "epoch", "worker", "task", "kind", "state", "origin", "user"),
    RecordType.FAULT: (*_HEAD, "worker", "task", "state", "victim"),
    RecordType.CONFIG: (*_HEAD, "epoch", "worker", "task", "state", "config"),
    RecordType.USER: (*_HEAD, "epoch", "state", "checkpoint"),
}
OPTIONAL_FIELDS: frozenset[str] = frozenset({"kind", "origin", "victim", "user"})

# ``state`` of a Main record: the post-state of every main-process spec variable (the spec's
# names; ``epoch`` is the record's own field, ``parent_alive`` is true while it logs).
# ``iter_state`` is the core's phase, ``failure`` the fatal error raised ("none" before one).
MAIN_STATE_FIELDS: tuple[str, ...] = (
    "send_idx",
    "rcvd_idx",
    "tasks_outstanding",
    "workers_status",
    "task_info",
    "shutdown",
    "iter_state",
    "in_call",
    "workers_num_tasks",
    "worker_queue_idx",
    "resume_iteration_cnt",
    "sentinel_sent",
    "failure",
    "workers_done_event",
    "pin_memory_thread_done_event",
)
# ``state`` of the Worker records that read or write the worker's own spec state.
WORKER_STATE_FIELDS: tuple[str, ...] = ("iteration_end",)
# ``origin`` of a record that moves a result message: [worker, task, epoch] of the message
# actually written or handed out (the payload-origin ghost; a resume ack's task is -1).
ORIGIN_FIELD = "origin"

# The parameters each action's record must carry besides t, pid, actor and action: the schema
# trace-check holds every record to (``required_fields``; loaderspec.traces.check_record_fields).
_W, _T, _K, _E, _O = "worker", "task", "kind", "epoch", ORIGIN_FIELD
ACTION_PARAMETERS: dict[Action, tuple[str, ...]] = {
    Action.MAIN_CALL_NEXT: (),
    Action.MAIN_TRY_PUT_INDEX: (_W, _T),
    Action.MAIN_GET_DATA: (_W, _T, _K, _O),
    Action.MAIN_PROCESS_DATA: (_W, _T, _K, _O),
    Action.MAIN_SKIP_EXHAUSTED: (_T,),
    Action.MAIN_MARK_WORKER_UNAVAILABLE: (_W, _T),
    Action.MAIN_STOP_ITERATION: (),
    Action.MAIN_DETECT_WORKER_FAILURE: (_W,),
    Action.MAIN_DETECT_PIN_FAILURE: (),
    Action.MAIN_TIMEOUT: (),
    Action.MAIN_RESUME_ITERATION: (),
    Action.MAIN_DRAIN_RESUME: (_W, _K, _O),
    Action.MAIN_DROP_ITERATOR: (),
    Action.MAIN_SET_PIN_DONE: (),
    Action.MAIN_JOIN_PIN_THREAD: (),
    Action.MAIN_SET_WORKERS_DONE: (),
    Action.MAIN_PUT_SENTINEL: (_W,),
    Action.MAIN_JOIN_WORKER: (_W,),
    Action.MAIN_TERMINATE_WORKER: (_W,),
    Action.WORKER_FETCH: (_E, _W, _T, _K),
    Action.WORKER_PUT: (_E, _W, _T, _K, _O),
    Action.WORKER_ACK_RESUME: (_E, _W),
    Action.WORKER_SKIP_INDEX: (_E, _W, _T),
    Action.WORKER_EXIT: (_W,),
    Action.WORKER_WATCHDOG_EXIT: (_W,),
    Action.PIN_GET_RESULT: (_W, _T, _K, _O),
    Action.PIN_PUT_DATA: (_W, _T, _K, _O),
    Action.PIN_EXIT: (),
    Action.FAULT_KILL_WORKER: (_W,),
    Action.FAULT_KILL_PARENT: (),
    Action.FAULT_HANG_WORKER: (_W,),
    Action.FAULT_FETCH_ERROR: (_W,),
    Action.FAULT_PUT_ERROR: (_W, _T),
    Action.FAULT_RECV_ERROR: (_W,),
    Action.FAULT_PIN_DEATH: (_W,),
}
# Faults the main process observes and logs itself, with its post-state (reference.loop.take).
MAIN_LOGGED_FAULTS: frozenset[Action] = frozenset({Action.FAULT_RECV_ERROR})
# Worker actions whose record carries the worker's state (WORKER_STATE_FIELDS).
WORKER_STATE_ACTIONS: frozenset[Action] = frozenset(
    {Action.WORKER_FETCH, Action.WORKER_ACK_RESUME, Action.WORKER_SKIP_INDEX}
)


def required_fields(action: Action | UserAction) -> tuple[str, ...]:
    """The fields a record of ``action`` must have (not null), generated from the tables above:
    its parameters, and for a record of the main process its epoch and whole post-state
    (``state`` with every ``MAIN_STATE_FIELDS`` key: ``required_state``); a user action's, the
    checkpoint (its ``state`` only when a live iterator took it)."""
    if isinstance(action, UserAction):
        return (CHECKPOINT_FIELD,)
    fields = ACTION_PARAMETERS[action]
    if action.actor is Actor.MAIN or action in MAIN_LOGGED_FAULTS:
        fields = (_E, *(f for f in fields if f != _E), "state")
    elif action in WORKER_STATE_ACTIONS:
        fields = (*fields, "state")
    return fields


def required_state(action: Action | UserAction) -> tuple[str, ...]:
    """The keys the ``state`` of a record of ``action`` must have (empty: no state)."""
    if isinstance(action, UserAction):
        return ()
    if action.actor is Actor.MAIN or action in MAIN_LOGGED_FAULTS:
        return MAIN_STATE_FIELDS
    if action in WORKER_STATE_ACTIONS:
        return WORKER_STATE_FIELDS
    return ()


# ``config`` of a Config record.
CONFIG_FIELDS: tuple[str, ...] = (
    "num_workers",
    "prefetch_factor",
    "in_order",
    "persistent_workers",
    "pin_memory",
    "iterable",
    "num_tasks",
    "timeout",
    "worker_pids",
)
# The spec constant each ``config`` field of a run's loader sets, the field named as torch's
# argument (``iterable``: the dataset is an IterableDataset): trace-check reads a run's constants
# off its header (tracecompile.constants_for), and a model's behaviour is replayed with the
# arguments its constants say (scenarios.schedule_of).
CONFIG_CONSTANT: dict[str, str] = {
    "num_workers": "NumWorkers",
    "prefetch_factor": "PrefetchFactor",
    "in_order": "InOrder",
    "persistent_workers": "Persistent",
    "pin_memory": "PinMemory",
    "iterable": "Iterable",
}
# torch's prefetch_factor where num_workers > 0 and none is given (torch.utils.data.DataLoader).
TORCH_PREFETCH_FACTOR = 2
# Optional ``config`` keys: ``start``, the state the iterator's first epoch began from
# (``CHECKPOINT_FIELDS``, plus ``total``: the sampler's batches, map-style).
CONFIG_START = "start"
# ``checkpoint`` of a User record (and ``start`` of a header): a state as trace-check compares
# it (reference/checkpoint.py ``trace_checkpoint``): the epoch, the sampler positions handed
# out (map-style), per worker shard the batches handed out and whose batch comes next
# (IterableDataset), per worker slot a fingerprint of its user state (dataset, iterator, RNGs)
# and one of the generator state the epoch's order is drawn from ("" for none). A Main record's
# ``user`` (MainProcessData) is the fingerprint of the user state the batch brought.
CHECKPOINT_FIELD = "checkpoint"
CHECKPOINT_FIELDS: tuple[str, ...] = (
    "epoch",
    "handed_below",
    "handed_above",
    "batches",
    "next_worker",
    "user",
    "rng",
)


# --- environment variables (the harness's) ------------------------------------------------------

# The loader under test of a conformance run, "package.module:Class"; the plugin's option
# `--loader` wins over it, and it wins over the ini key `loaderspec_loader`.
LOADER_ENV = "LOADERSPEC_LOADER"

# The conformance suite's command line (the pytest plugin, `loaderspec report`): where the loader
# under test is named, and the exit policies (conformance.verdict).
LOADER_OPTION = "--conformance-loader"
LOADER_SHORT_OPTION = "--loader"  # only where no other plugin or conftest defines --loader
LOADER_INI = "loaderspec_loader"
DEFAULT_LOADER = "loaderspec.reference:DataLoader"
FAIL_ON = ("must", "should", "never")  # the first is the default
