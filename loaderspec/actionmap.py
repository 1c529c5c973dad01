"""Which spec properties each spec action can break.

A conformance case guards an action when it is marked with a property that a wrong version of
that action would violate; ``tests/test_one_name_four_places.py`` requires one such case per
action, and ``loaderspec.scenarios`` names the property a generated scenario checks. The table is
a reading of the spec, kept here (not in ``vocabulary``) because it is a judgement about the
model, not a name: each row says what goes wrong when the action does the wrong thing.
Must not import torch, the reference loader or the conformance suite.
"""

from __future__ import annotations

from loaderspec.vocabulary import PROPERTY_NAMES, Action

A = Action
ACTION_CAN_BREAK: dict[Action, frozenset[str]] = {
    # sending too much, or to a retired worker
    A.MAIN_TRY_PUT_INDEX: frozenset({"PrefetchBound", "ExactlyOnce", "NoSilentLoss"}),
    # taking a result of the wrong task or epoch off the queue
    A.MAIN_GET_DATA: frozenset({"NoDuplicateDelivery", "NoStaleEpochDelivery", "InOrderDelivery"}),
    # handing out out of turn, twice, stale or after the end
    A.MAIN_PROCESS_DATA: frozenset(
        {
            "InOrderDelivery",
            "NoDuplicateDelivery",
            "NoDeliveryAfterShutdown",
            "NoStaleEpochDelivery",
            "ExactlyOnce",
        }
    ),
    # stepping over a slot that was still live
    A.MAIN_SKIP_EXHAUSTED: frozenset({"NoSilentLoss", "ExactlyOnce"}),
    # retiring a worker whose tasks were still owed
    A.MAIN_MARK_WORKER_UNAVAILABLE: frozenset({"NoSilentLoss", "IterationTerminates"}),
    # ending the epoch early
    A.MAIN_STOP_ITERATION: frozenset({"ExactlyOnce", "NoSilentLoss"}),
    A.MAIN_DETECT_WORKER_FAILURE: frozenset(
        {"WorkerDeathRaises", "FailStopAfterWorkerDeath", "PromptFaultHandling"}
    ),
    A.MAIN_TIMEOUT: frozenset({"IterationTerminates"}),
    # a new epoch that lets old results through
    A.MAIN_RESUME_ITERATION: frozenset({"NoStaleEpochDelivery", "ExactlyOnce"}),
    A.MAIN_DRAIN_RESUME: frozenset({"NoStaleEpochDelivery"}),
    A.MAIN_DROP_ITERATOR: frozenset({"ShutdownCompletes", "NoDeliveryAfterShutdown"}),
    # shutdown in the wrong order, or never finishing
    A.MAIN_SET_PIN_DONE: frozenset({"PinThreadExitsFirst", "ShutdownCompletes"}),
    A.MAIN_JOIN_PIN_THREAD: frozenset({"PinThreadExitsFirst", "ShutdownCompletes"}),
    A.MAIN_SET_WORKERS_DONE: frozenset({"PinThreadExitsFirst", "ShutdownCompletes"}),
    A.MAIN_PUT_SENTINEL: frozenset({"PinThreadExitsFirst", "ShutdownCompletes"}),
    A.MAIN_JOIN_WORKER: frozenset({"ShutdownCompletes"}),
    A.MAIN_TERMINATE_WORKER: frozenset({"ShutdownCompletes"}),
    # a worker that fetches twice, loses a result, or mixes epochs
    A.WORKER_FETCH: frozenset({"ExactlyOnce", "NoDuplicateDelivery", "NoStaleEpochDelivery"}),
    A.WORKER_PUT: frozenset({"ExactlyOnce", "NoDeadlock", "IterationTerminates"}),
    A.WORKER_ACK_RESUME: frozenset({"NoStaleEpochDelivery"}),
    A.WORKER_SKIP_INDEX: frozenset({"NoSilentLoss", "ShutdownCompletes"}),
    A.WORKER_EXIT: frozenset({"ShutdownCompletes"}),
    A.WORKER_WATCHDOG_EXIT: frozenset({"NoOrphanWorkers"}),
    # the pin thread: reorders, loses, or outlives the workers
    A.PIN_GET_RESULT: frozenset({"InOrderDelivery", "ExactlyOnce", "NoDeadlock"}),
    A.PIN_PUT_DATA: frozenset({"InOrderDelivery", "ExactlyOnce", "NoDeadlock"}),
    A.PIN_EXIT: frozenset({"PinThreadExitsFirst", "ShutdownCompletes"}),
    # faults: what a loader must still guarantee when they happen
    A.FAULT_KILL_WORKER: frozenset(
        {"WorkerDeathRaises", "FailStopAfterWorkerDeath", "NoSilentLoss", "IterationTerminates"}
    ),
    A.FAULT_KILL_PARENT: frozenset({"NoOrphanWorkers"}),
    A.FAULT_HANG_WORKER: frozenset({"IterationTerminates", "ShutdownCompletes"}),
    A.FAULT_FETCH_ERROR: frozenset({"InOrderDelivery", "ExactlyOnce", "IterationTerminates"}),
}

assert set(ACTION_CAN_BREAK) == set(Action), "every action needs a row"
assert all(props <= PROPERTY_NAMES for props in ACTION_CAN_BREAK.values()), "unknown property"
