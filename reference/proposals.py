"""How ``next_action()`` proposes each main-process action, and the rows it walks, compiled.

Owns ``PROPOSALS`` (torch's policy of *when* the main process tries an action, and the
parameters it picks where the spec leaves them free), ``ALARM_ACTIONS``, and the rows of
``reference.transitions``' ``NEXT_ACTIONS`` and ``SHUTDOWN_ACTIONS`` compiled once, at import,
into flat tries (``PROPOSAL_ROWS``, ``QUIET_ROWS``, ``SHUTDOWN_PROPOSAL_ROWS``): what
``ProtocolCore.next_action()`` walks on every step of every batch, so their shape is chosen for
speed. A proposal asks the action's guard (``reference.guards``) before it proposes a step; it
reads the core's fields and changes none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from loaderspec.reference.guards import (
    GUARDS,
    join_guard,
    mark_guard,
    put_guard,
    sentinel_guard,
    timeout_guard,
)
from loaderspec.reference.steps import Step
from loaderspec.reference.transitions import NEXT_ACTIONS, SHUTDOWN_ACTIONS

from loaderspec.vocabulary import Action

if TYPE_CHECKING:
    from loaderspec.reference.core import ProtocolCore

_A = Action
# What every batch's proposals compare with, as module names (see reference.core).
_TRY_PUT, _PROCESS = _A.MAIN_TRY_PUT_INDEX, _A.MAIN_PROCESS_DATA
# Step(...) without NamedTuple's Python-level __new__ (half the cost), for the per-batch steps.
_new_step = tuple.__new__

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
Proposal = Callable[["ProtocolCore"], Step | None]


class Pick(NamedTuple):
    """The parameters of an action whose guard holds, read off the state."""

    step: Callable[[ProtocolCore], Step]


def _propose_put(core: ProtocolCore) -> Step | None:
    # torch's policy: prefetch_factor * num_workers puts as an epoch starts, then one per
    # hand-out or retirement; with nothing pending a put is due whatever the budget (NothingLeft
    # holds only once the sampler ran dry).
    if (core.put_budget <= 0 and core.rcvd_idx != core.send_idx) or put_guard(core):
        return None
    worker = core.next_worker()
    return None if worker is None else _new_step(Step, (_TRY_PUT, worker, core.send_idx, None))


CALL_STEP = Step(_A.MAIN_CALL_NEXT)
_GET_STEP = Step(_A.MAIN_GET_DATA)
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
    return Step(Action.MAIN_TIMEOUT) if core.deadline and not timeout_guard(core) else None


def _propose_mark(core: ProtocolCore) -> Step | None:
    w = core.exhausted_worker
    if w is None or mark_guard(core, w) is not None:
        return None
    return Step(Action.MAIN_MARK_WORKER_UNAVAILABLE, w, core.exhausted_task)


def _propose_sentinel(core: ProtocolCore) -> Step | None:
    for worker in core.needs_sentinel():  # the first whose guard holds
        if sentinel_guard(core, worker) is None:
            return Step(Action.MAIN_PUT_SENTINEL, worker)
    return None


def _propose_join(core: ProtocolCore) -> Step | None:
    # One step for all: the workers are joined together, each one's record when it is reaped.
    unjoined = core.unjoined()
    return Step(Action.MAIN_JOIN_WORKER) if unjoined and not join_guard(core, unjoined[0]) else None


def _process_step(core: ProtocolCore) -> Step:
    idx = core.hand_out_idx()
    return _new_step(Step, (_PROCESS, core.task_info[idx][0], idx, None))


def _detect_step(core: ProtocolCore) -> Step:
    # The spec reports one dead worker; the error names them all.
    return Step(Action.MAIN_DETECT_WORKER_FAILURE, core.dead_dependencies()[0])


def _skip_step(core: ProtocolCore) -> Step:
    return Step(Action.MAIN_SKIP_EXHAUSTED, None, core.rcvd_idx)


PROPOSALS: dict[Action, Step | Pick | Proposal] = {
    _A.MAIN_CALL_NEXT: CALL_STEP,
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
# parameters) where that was the action's guard; a proposal is asked alone. What it asks returns
# a Guard's reason (str | None) or a Proposal's Step | None, told apart by the other two slots
# (one flat tuple is what keeps next_action() fast), so its type is Any and next_action() names
# the type of each answer.
Try = tuple[Callable[["ProtocolCore"], Any], Step | None, Callable[["ProtocolCore"], Step] | None]


def try_of(action: Action) -> Try:
    proposal = PROPOSALS[action]
    if isinstance(proposal, Step):
        return GUARDS.get(action, _holds), proposal, None
    if isinstance(proposal, Pick):
        return GUARDS[action], None, proposal.step
    return proposal, None, None


# The rows with each action's try in its place (what next_action() walks).
PROPOSAL_ROWS = {
    request: {phase: tuple(try_of(a) for a in row) for phase, row in rows.items()}
    for request, rows in NEXT_ACTIONS.items()
}
SHUTDOWN_PROPOSAL_ROWS = {
    stage: tuple(try_of(a) for a in row) for stage, row in SHUTDOWN_ACTIONS.items()
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
QUIET_ROWS = {
    request: {
        phase: tuple(try_of(a) for a in row if a not in ALARM_ACTIONS)
        for phase, row in rows.items()
    }
    for request, rows in NEXT_ACTIONS.items()
}
