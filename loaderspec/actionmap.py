"""Which spec properties each spec action can break.

A conformance case guards an action when it is marked with a property that a wrong version of
that action would violate; ``tests/test_one_name_four_places.py`` requires one such case per
action. The table is a reading of the spec, kept here (not in ``vocabulary``) because it is a
judgement about the model, not a name: each row says what goes wrong when the action does the
wrong thing (spec/MCBroken.tla holds a variant for most rows).
Must not import torch, the reference loader or the conformance suite.
"""

from __future__ import annotations

from loaderspec.vocabulary import Action, PropertyName, UserAction

A = Action
P = PropertyName
ACTION_CAN_BREAK: dict[Action, frozenset[PropertyName]] = {
    # the user's call: a call after the end that hands something out, or one that never returns
    A.MAIN_CALL_NEXT: frozenset(
        {P.NO_DELIVERY_AFTER_SHUTDOWN, P.FAIL_STOP_AFTER_FATAL_ERROR, P.ITERATION_TERMINATES}
    ),
    # sending too much, or to a retired worker
    A.MAIN_TRY_PUT_INDEX: frozenset(
        {P.PREFETCH_BOUND, P.EXACTLY_ONCE, P.NO_SILENT_LOSS, P.NO_DISPATCH_AFTER_END}
    ),
    # taking a result of the wrong task or epoch off the queue
    A.MAIN_GET_DATA: frozenset(
        {P.NO_DUPLICATE_DELIVERY, P.NO_STALE_EPOCH_DELIVERY, P.IN_ORDER_DELIVERY}
    ),
    # handing out out of turn, twice, stale or after the end
    A.MAIN_PROCESS_DATA: frozenset(
        {
            P.IN_ORDER_DELIVERY,
            P.NO_DUPLICATE_DELIVERY,
            P.NO_DELIVERY_AFTER_SHUTDOWN,
            P.NO_STALE_EPOCH_DELIVERY,
            P.EXACTLY_ONCE,
        }
    ),
    # stepping over a slot that was still live
    A.MAIN_SKIP_EXHAUSTED: frozenset({P.NO_SILENT_LOSS, P.EXACTLY_ONCE}),
    # retiring a worker whose tasks were still owed
    A.MAIN_MARK_WORKER_UNAVAILABLE: frozenset({P.NO_SILENT_LOSS, P.ITERATION_TERMINATES}),
    # ending the epoch early
    A.MAIN_STOP_ITERATION: frozenset({P.EXACTLY_ONCE, P.NO_SILENT_LOSS}),
    A.MAIN_DETECT_WORKER_FAILURE: frozenset(
        {
            P.WORKER_DEATH_RAISES,
            P.FAIL_STOP_AFTER_FATAL_ERROR,
            P.PROMPT_FAULT_HANDLING,
            P.FATAL_ERROR_SHUTS_DOWN,
        }
    ),
    A.MAIN_DETECT_PIN_FAILURE: frozenset(
        {P.ITERATION_TERMINATES, P.FAIL_STOP_AFTER_FATAL_ERROR, P.NO_DEADLOCK}
    ),
    A.MAIN_TIMEOUT: frozenset(
        {P.ITERATION_TERMINATES, P.WORKER_DEATH_RAISES, P.FATAL_ERROR_SHUTS_DOWN}
    ),
    # a new epoch that lets old results through
    A.MAIN_RESUME_ITERATION: frozenset({P.NO_STALE_EPOCH_DELIVERY, P.EXACTLY_ONCE}),
    A.MAIN_DRAIN_RESUME: frozenset({P.NO_STALE_EPOCH_DELIVERY}),
    # a drop that leaves the epoch's prefetch running, or never shuts down
    A.MAIN_DROP_ITERATOR: frozenset(
        {P.SHUTDOWN_COMPLETES, P.NO_DELIVERY_AFTER_SHUTDOWN, P.NO_DISPATCH_AFTER_END}
    ),
    # shutdown in the wrong order, or never finishing
    A.MAIN_SET_PIN_DONE: frozenset({P.PIN_THREAD_EXITS_FIRST, P.SHUTDOWN_COMPLETES}),
    A.MAIN_JOIN_PIN_THREAD: frozenset(
        {P.PIN_THREAD_EXITS_FIRST, P.SHUTDOWN_COMPLETES, P.SHUTDOWN_ORDER}
    ),
    A.MAIN_SET_WORKERS_DONE: frozenset(
        {P.PIN_THREAD_EXITS_FIRST, P.SHUTDOWN_COMPLETES, P.SHUTDOWN_ORDER}
    ),
    A.MAIN_PUT_SENTINEL: frozenset(
        {P.PIN_THREAD_EXITS_FIRST, P.SHUTDOWN_COMPLETES, P.SHUTDOWN_ORDER}
    ),
    A.MAIN_JOIN_WORKER: frozenset({P.SHUTDOWN_COMPLETES, P.JOIN_AFTER_SENTINELS}),
    A.MAIN_TERMINATE_WORKER: frozenset(
        {P.SHUTDOWN_COMPLETES, P.NO_DEADLOCK, P.JOIN_AFTER_SENTINELS}
    ),
    # a worker that fetches twice, loses a result, or mixes epochs
    A.WORKER_FETCH: frozenset(
        {P.EXACTLY_ONCE, P.NO_DUPLICATE_DELIVERY, P.NO_STALE_EPOCH_DELIVERY, P.NO_FETCH_AFTER_DONE}
    ),
    A.WORKER_PUT: frozenset({P.EXACTLY_ONCE, P.NO_DEADLOCK, P.ITERATION_TERMINATES}),
    A.WORKER_ACK_RESUME: frozenset({P.NO_STALE_EPOCH_DELIVERY}),
    A.WORKER_SKIP_INDEX: frozenset({P.NO_SILENT_LOSS, P.SHUTDOWN_COMPLETES, P.NO_FETCH_AFTER_DONE}),
    A.WORKER_EXIT: frozenset({P.SHUTDOWN_COMPLETES}),
    A.WORKER_WATCHDOG_EXIT: frozenset({P.NO_ORPHAN_WORKERS}),
    # the pin thread: reorders, loses, or outlives the workers
    A.PIN_GET_RESULT: frozenset(
        {P.IN_ORDER_DELIVERY, P.EXACTLY_ONCE, P.NO_DEADLOCK, P.PIN_THREAD_EXITS_FIRST}
    ),
    A.PIN_PUT_DATA: frozenset({P.IN_ORDER_DELIVERY, P.EXACTLY_ONCE, P.NO_DEADLOCK}),
    A.PIN_EXIT: frozenset({P.PIN_THREAD_EXITS_FIRST, P.SHUTDOWN_COMPLETES}),
    # faults: what a loader must still guarantee when they happen
    A.FAULT_KILL_WORKER: frozenset(
        {
            P.WORKER_DEATH_RAISES,
            P.FAIL_STOP_AFTER_FATAL_ERROR,
            P.NO_SILENT_LOSS,
            P.ITERATION_TERMINATES,
        }
    ),
    A.FAULT_KILL_PARENT: frozenset({P.NO_ORPHAN_WORKERS}),
    A.FAULT_HANG_WORKER: frozenset({P.ITERATION_TERMINATES, P.SHUTDOWN_COMPLETES}),
    A.FAULT_FETCH_ERROR: frozenset({P.IN_ORDER_DELIVERY, P.EXACTLY_ONCE, P.ITERATION_TERMINATES}),
    A.FAULT_PUT_ERROR: frozenset({P.ITERATION_TERMINATES, P.NO_DEADLOCK, P.EXACTLY_ONCE}),
    A.FAULT_RECV_ERROR: frozenset(
        {P.ITERATION_TERMINATES, P.NO_DEADLOCK, P.FAIL_STOP_AFTER_FATAL_ERROR}
    ),
    A.FAULT_PIN_DEATH: frozenset({P.ITERATION_TERMINATES, P.NO_DEADLOCK, P.SHUTDOWN_COMPLETES}),
}

assert set(ACTION_CAN_BREAK) == set(Action), "every action needs a row"

# The user's checkpoint calls (spec/DataLoaderCheckpoint.tla), traced as UserAction records.
USER_ACTION_CAN_BREAK: dict[UserAction, frozenset[PropertyName]] = {
    # a state that counts what was not handed out, changes later, or stays the loaded one
    UserAction.USER_STATE_DICT: frozenset(
        {P.CHECKPOINT_IS_HANDED_OUT, P.SNAPSHOT_IS_IMMUTABLE, P.RESUME_ADVANCES}
    ),
    # a load that is ignored, let through under another num_workers, or resumes elsewhere
    UserAction.USER_LOAD_STATE_DICT: frozenset(
        {P.LOAD_IS_NEVER_IGNORED, P.RESUME_TOPOLOGY_EXPLICIT, P.RESUME_EQUIVALENCE}
    ),
}

assert set(USER_ACTION_CAN_BREAK) == set(UserAction), "every user action needs a row"
