"""The shared vocabulary of loaderspec: spec actions, spec properties, and their levels.

One name, four places (docs/STYLE): a spec action ``MainTryPutIndex`` is the TLA+ action of that
name in ``spec/DataLoader.tla``, the ``Action`` member whose value is that name, the reference
core's method (torch's name where one exists, given in ``CORE_METHOD``), the ``"action"`` field of
a trace record, and ``MainTryPutIndexIfLogged`` in ``spec/TraceDataLoader.tla``. Properties are
named as claims; each conformance case is marked with one of ``Property``'s values.

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


class Action(enum.Enum):
    """Every step of the protocol. Values are the TLA+ action names in ``spec/DataLoader.tla``."""

    # --- main process: the prefetch / reorder loop (torch: _try_put_index, _next_data) ---------
    MAIN_TRY_PUT_INDEX = "MainTryPutIndex"  # send task send_idx to the next active worker
    MAIN_GET_DATA = "MainGetData"  # take one (idx, data) message off the data queue
    MAIN_PROCESS_DATA = "MainProcessData"  # hand out task rcvd_idx (any, in_order=False); reraise
    MAIN_SKIP_EXHAUSTED = "MainSkipExhausted"  # step rcvd_idx over a retired worker's empty slot
    MAIN_MARK_WORKER_UNAVAILABLE = "MainMarkWorkerUnavailable"  # retire a worker after exhaustion
    MAIN_STOP_ITERATION = "MainStopIteration"  # nothing left: raise StopIteration
    MAIN_DETECT_WORKER_FAILURE = "MainDetectWorkerFailure"  # a worker died: raise RuntimeError
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
    Action.MAIN_TRY_PUT_INDEX: "try_put_index",
    Action.MAIN_GET_DATA: "get_data",
    Action.MAIN_PROCESS_DATA: "process_data",
    Action.MAIN_SKIP_EXHAUSTED: "skip_exhausted",
    Action.MAIN_MARK_WORKER_UNAVAILABLE: "mark_worker_as_unavailable",
    Action.MAIN_STOP_ITERATION: "stop_iteration",
    Action.MAIN_DETECT_WORKER_FAILURE: "detect_worker_failure",
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


class Kind(enum.Enum):
    """How TLC checks a property."""

    INVARIANT = "invariant"  # a state predicate (cfg INVARIANT)
    TEMPORAL = "temporal"  # a temporal formula (cfg PROPERTY), under the spec's fairness
    DEADLOCK = "deadlock"  # TLC's built-in deadlock check
    MEASURED = "measured"  # wall-clock bounds: the conformance suite's clocks, not TLC


@dataclass(frozen=True)
class Property:
    """A claim of the spec, as TLC checks it and as the conformance suite grades it."""

    name: str  # the TLA+ definition name in spec/DataLoader.tla
    level: Level
    kind: Kind
    claim: str  # one sentence: what a correct loader guarantees


PROPERTIES: tuple[Property, ...] = (
    Property("TypeOK", Level.MUST, Kind.INVARIANT, "Every variable holds a value of its type."),
    Property(
        "InOrderDelivery",
        Level.MUST,
        Kind.INVARIANT,
        "With in_order=True, batches are handed out in sampler order.",
    ),
    Property(
        "NoDuplicateDelivery",
        Level.MUST,
        Kind.INVARIANT,
        "No task is handed out twice within an epoch, in either ordering mode.",
    ),
    Property(
        "ExactlyOnce",
        Level.MUST,
        Kind.INVARIANT,
        "An epoch that ends in StopIteration without a fault has handed out every task once.",
    ),
    Property(
        "NoSilentLoss",
        Level.MUST,
        Kind.INVARIANT,
        "StopIteration is never raised while a task of a dead worker was not handed out.",
    ),
    Property(
        "PrefetchBound",
        Level.MUST,
        Kind.INVARIANT,
        "At most prefetch_factor * num_workers tasks are outstanding at any time.",
    ),
    Property(
        "NoDeliveryAfterShutdown",
        Level.MUST,
        Kind.INVARIANT,
        "Nothing is handed out after the iterator has ended, raised a fatal error or shut down.",
    ),
    Property(
        "NoStaleEpochDelivery",
        Level.MUST,
        Kind.INVARIANT,
        "A batch fetched for an earlier epoch is never handed out in a later one.",
    ),
    Property(
        "PinThreadExitsFirst",
        Level.MUST,
        Kind.INVARIANT,
        "At shutdown no worker is told to exit while the pin-memory thread still reads.",
    ),
    Property(
        "NoDeadlock",
        Level.MUST,
        Kind.DEADLOCK,
        "Some step is always possible until the run has ended.",
    ),
    Property(
        "IterationTerminates",
        Level.MUST,
        Kind.TEMPORAL,
        "Every next() returns, raises StopIteration or raises an error (never hangs),"
        " unless a worker hangs and no timeout is set.",
    ),
    Property(
        "WorkerDeathRaises",
        Level.MUST,
        Kind.TEMPORAL,
        "A worker that dies while the iterator depends on it makes the main process raise.",
    ),
    Property(
        "ShutdownCompletes",
        Level.MUST,
        Kind.TEMPORAL,
        "Once shutdown starts, every worker and the pin-memory thread are eventually gone,"
        " stuck workers included.",
    ),
    Property(
        "NoOrphanWorkers",
        Level.MUST,
        Kind.TEMPORAL,
        "After the loader's process dies, every worker exits, busy and blocked ones included.",
    ),
    Property(
        "FailStopAfterWorkerDeath",
        Level.SHOULD,
        Kind.INVARIANT,
        "After a worker death was reported, later next() calls raise promptly instead of"
        " handing out batches that other workers fetched.",
    ),
    Property(
        "PromptFaultHandling",
        Level.SHOULD,
        Kind.MEASURED,
        "Worker death is reported, shutdown completes and orphans exit within 0.5 s"
        " (torch's 5 s status-check interval is allowed, as NON-STRICT).",
    ),
)

PROPERTY_NAMES: frozenset[str] = frozenset(p.name for p in PROPERTIES)


def property_named(name: str) -> Property:
    """Look a property up by its spec name.

    Raises:
        KeyError: naming the unknown property and listing the known ones.
    """
    for prop in PROPERTIES:
        if prop.name == name:
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
    """The three shapes of a trace record."""

    STEP = "step"  # a spec action of the main process, a worker or the pin thread
    FAULT = "fault"  # a Fault* action, written by whoever injects it, just before
    CONFIG = "config"  # an iterator's header: the model constants its run follows


# The fields of each record type, in the order they are written. ``kind`` is written only on
# records whose action has one (docs/contracts.md lists them).
RECORD_FIELDS: dict[RecordType, tuple[str, ...]] = {
    RecordType.STEP: ("t", "pid", "actor", "action", "epoch", "worker", "task", "kind", "state"),
    RecordType.FAULT: ("t", "pid", "actor", "action", "worker", "task", "state"),
    RecordType.CONFIG: (
        "t",
        "pid",
        "actor",
        "action",
        "epoch",
        "worker",
        "task",
        "state",
        "config",
    ),
}
OPTIONAL_FIELDS: frozenset[str] = frozenset({"kind"})

# ``state`` of a Main record: the post-state of the main process's spec variables.
MAIN_STATE_FIELDS: tuple[str, ...] = (
    "send_idx",
    "rcvd_idx",
    "tasks_outstanding",
    "workers_status",
    "task_info",
    "shutdown",
)
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


# --- environment variables (the harness's) ------------------------------------------------------

# The loader under test of a conformance run, "package.module:Class"; the plugin's option
# `--loader` wins over it, and it wins over the ini key `loaderspec_loader`.
LOADER_ENV = "LOADERSPEC_LOADER"

# The conformance suite's command line (the pytest plugin, `loaderspec report`): where the loader
# under test is named, and the exit policies (conformance.verdict).
LOADER_OPTION = "--conformance-loader"
LOADER_SHORT_OPTION = "--loader"  # only where no other plugin or conftest defines --loader
LOADER_INI = "loaderspec_loader"
DEFAULT_LOADER = "reference:DataLoader"
FAIL_ON = ("must", "should", "never")  # the first is the default
