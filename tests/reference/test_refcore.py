"""The pure protocol core, driven by events only (no processes): units, whole epochs, Hypothesis.

Whole epochs run on ``refcore_model.World`` through ``reference.loop``, the loop the shell runs:
Hypothesis draws a configuration, then every interleaving choice (which worker steps, which
result the main process reads, whether and when a worker is killed or hangs, when the timeout
expires, where an epoch is broken off); the world checks the spec's invariants after each step.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loaderspec.reference import loop
from loaderspec.reference.core import Failure, ProtocolConfig, ProtocolCore
from loaderspec.reference.guards import GUARDS
from loaderspec.reference.proposals import PROPOSALS
from loaderspec.reference.steps import Kind, ProtocolViolation
from loaderspec.reference.transitions import (
    NEXT_ACTIONS,
    OBSERVED_FAULT_METHOD,
    PHASE_TRANSITIONS,
    REPORTED_ACTIONS,
    SHUTDOWN_ACTIONS,
    SHUTDOWN_TRANSITIONS,
    Phase,
    Request,
    Stage,
)
from refcore_model import Config, World

from loaderspec import tracewriter
from loaderspec.vocabulary import CORE_METHOD, MAIN_STATE_FIELDS, TRACE_FILE, Action

REFERENCE = Path(__file__).resolve().parents[2] / "reference"
# The main process's core: its class, its tables, its guards, its proposals and compiled rows.
CORE_MODULES = ("core.py", "transitions.py", "guards.py", "proposals.py")


def _core(num_workers: int = 1, prefetch_factor: int = 1, **kwargs) -> ProtocolCore:
    return ProtocolCore(ProtocolConfig(num_workers, prefetch_factor, **kwargs))


def _next(core: ProtocolCore) -> Action:
    """What next() would do first now, once its call has begun (MainCallNext)."""
    core.ask(Request.NEXT)
    step = core.next_action()
    if step is not None and step.action is Action.MAIN_CALL_NEXT:
        core.call_next()
        step = core.next_action()
    assert step is not None
    return step.action


# ----------------------------------------------------------------------- the tables ---------
def test_every_row_action_has_a_proposal_and_the_others_are_reported():
    in_rows = {a for by_phase in NEXT_ACTIONS.values() for row in by_phase.values() for a in row}
    in_rows |= {a for row in SHUTDOWN_ACTIONS.values() for a in row}
    assert in_rows == set(PROPOSALS)
    assert set(PROPOSALS) | REPORTED_ACTIONS == set(CORE_METHOD) | set(OBSERVED_FAULT_METHOD)
    # Every guard is the guard of an action the core takes; the actions without one are
    # enabled by their row's phase or stage alone (PHASE_TRANSITIONS, SHUTDOWN_TRANSITIONS).
    assert set(GUARDS) <= set(CORE_METHOD) | set(OBSERVED_FAULT_METHOD)
    assert set(SHUTDOWN_ACTIONS) == set(SHUTDOWN_TRANSITIONS) == set(Stage)
    for stage, row in SHUTDOWN_ACTIONS.items():
        assert set(row) <= set(SHUTDOWN_TRANSITIONS[stage]), stage


def _modules_imported_whole(source: str) -> list[str]:
    """The core's modules that ``source`` imports as modules (``from loaderspec.reference import
    guards``, ``import loaderspec.reference.guards``): their names would then be read as
    attributes on every step, where a name imported from them is a module name of the reader."""
    core = {name.removesuffix(".py") for name in CORE_MODULES}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "loaderspec.reference":
            found += [a.name for a in node.names if a.name in core]
        elif isinstance(node, ast.Import):
            found += [
                a.name.rsplit(".", 1)[1] for a in node.names if a.name.rsplit(".", 1)[-1] in core
            ]
    return found


def test_the_core_modules_import_names_from_each_other_not_modules():
    """Split across modules, the per-batch path still reads the tables, guards and rows as
    module names (bound by ``from ... import``), never as another module's attributes."""
    assert _modules_imported_whole("from loaderspec.reference import guards\n") == ["guards"]
    assert _modules_imported_whole("import loaderspec.reference.proposals\n") == ["proposals"]
    for name in CORE_MODULES:
        assert _modules_imported_whole((REFERENCE / name).read_text()) == [], name


def test_each_guard_is_written_once():
    """Each guard is defined once, and the method of its action asks it (next_action() asks it
    through PROPOSALS): no method keeps a copy of its action's condition."""
    trees = {name: ast.parse((REFERENCE / name).read_text()) for name in CORE_MODULES}
    defined = [n.name for t in trees.values() for n in t.body if isinstance(n, ast.FunctionDef)]
    tree = trees["core.py"]
    core = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ProtocolCore")
    methods = {n.name: n for n in core.body if isinstance(n, ast.FunctionDef)}
    names = {**CORE_METHOD, **OBSERVED_FAULT_METHOD}
    for action, guard in GUARDS.items():
        assert defined.count(guard.__name__) == 1, guard.__name__
        asked = {n.id for n in ast.walk(methods[names[action]]) if isinstance(n, ast.Name)}
        assert guard.__name__ in asked, f"{names[action]} does not ask {guard.__name__}"


def test_a_fresh_iterator_prefetches_max_tasks_round_robin_then_is_served():
    core = _core(2, 2)
    sent = []
    while (step := core.next_action()) is not None:
        assert step.action is Action.MAIN_TRY_PUT_INDEX
        sent.append((core.try_put_index(step.worker), step.worker))
    assert sent == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert core.tasks_outstanding == core.max_tasks == 4
    with pytest.raises(ProtocolViolation) as err:
        core.try_put_index(0)
    assert err.value.action is Action.MAIN_TRY_PUT_INDEX
    assert "prefetch bound" in str(err.value)
    assert err.value.state["send_idx"] == 4


def test_a_hand_out_is_followed_by_one_refill_put():
    core = _core(1, 2)
    core.try_put_index(0)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.DATA, "a")
    assert _next(core) is Action.MAIN_PROCESS_DATA
    assert core.process_data().payload == "a"
    assert core.request is Request.REFILL
    step = core.next_action()
    assert step is not None
    assert (step.action, step.worker, step.task) == (Action.MAIN_TRY_PUT_INDEX, 0, 2)
    core.try_put_index(0)
    assert core.next_action() is None  # next() is served: one put per hand-out


def test_stop_iteration_waits_until_the_sampler_ran_dry():
    core = _core(1, 1)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.DATA, "a")
    core.process_data()
    assert _next(core) is Action.MAIN_TRY_PUT_INDEX  # NothingLeft needs a dry sampler
    with pytest.raises(ProtocolViolation):
        core.stop_iteration()
    core.sampler_ran_dry()
    assert _next(core) is Action.MAIN_STOP_ITERATION
    assert core.stop_iteration() is True  # not persistent: shutdown is decided now
    assert core.phase is Phase.ENDED
    assert core.stage is Stage.PIN_GONE
    assert _next(core) is Action.MAIN_STOP_ITERATION  # next() after the end: StopIteration
    assert core.stop_iteration() is False  # decided already


def test_in_order_buffers_out_of_order_results():
    core = _core(2, 1)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(1, 1, Kind.DATA, "b")
    assert _next(core) is Action.MAIN_GET_DATA  # task 0 first
    assert core.task_info == {0: [0, False], 1: [1, True]}
    core.get_data(0, 0, Kind.DATA, "a")
    assert [core.process_data().payload, core.process_data().payload] == ["a", "b"]
    core.sampler_ran_dry()
    assert _next(core) is Action.MAIN_STOP_ITERATION


def test_out_of_order_hands_out_on_arrival_then_skips_the_slot():
    core = _core(2, 1, in_order=False)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(1, 1, Kind.DATA, "b")
    assert core.process_data().idx == 1
    assert core.rcvd_idx == 0
    core.get_data(0, 0, Kind.DATA, "a")
    assert core.process_data().idx == 0
    core.sampler_ran_dry()
    assert core.rcvd_idx == 1  # task 0 was rcvd_idx's: handed out in its turn
    assert _next(core) is Action.MAIN_SKIP_EXHAUSTED
    assert core.skip_exhausted() == 1  # handed out early: its slot is stepped over
    assert _next(core) is Action.MAIN_STOP_ITERATION


def test_exhausted_worker_is_retired_with_its_queued_tasks():
    core = _core(1, 2, iterable=True)
    core.try_put_index(0)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.EXHAUSTED)
    assert _next(core) is Action.MAIN_MARK_WORKER_UNAVAILABLE
    assert core.mark_worker_as_unavailable(0) is True  # not persistent: send the sentinel
    assert core.next_worker() is None
    assert core.skip_exhausted() == 0  # slot 0 (dropped by the mark)
    assert core.skip_exhausted() == 1  # slot 1 (the worker skips it)
    assert core.tasks_outstanding == 0
    assert core.nothing_left()  # no active worker: no task can be sent any more
    assert core.stop_iteration() is True


def test_exhausted_is_a_violation_for_map_datasets():
    core = _core(1, 1)
    core.try_put_index(0)
    with pytest.raises(ProtocolViolation):
        core.get_data(0, 0, Kind.EXHAUSTED)
    assert core.tasks_outstanding == 1  # unchanged


def test_fail_stop_after_worker_death():
    core = _core(2, 1)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(0, 0, Kind.DATA, "a")
    core.worker_ended(1)
    assert _next(core) is Action.MAIN_DETECT_WORKER_FAILURE
    assert core.next_action() == (Action.MAIN_DETECT_WORKER_FAILURE, 1, None, None)
    assert core.detect_worker_failure() == Failure(Action.MAIN_DETECT_WORKER_FAILURE, (1,))
    assert core.failed
    assert core.shutdown
    assert not core.in_call  # the call raised
    assert not core.waits_for_workers  # terminate at once, the error is raised now
    core.ask(Request.NEXT)  # a later next(): the call, and nothing else (the loop raises again)
    assert core.next_action() == (Action.MAIN_CALL_NEXT, None, None, None)
    before = core.snapshot()
    core.call_next()
    assert (core.phase, core.in_call, core.snapshot()) == (Phase.FAILED, False, before)
    with pytest.raises(ProtocolViolation):
        core.process_data()


def test_timeout_only_while_waiting_for_data():
    core = _core(1, 1)
    with pytest.raises(ProtocolViolation):
        core.timeout()  # nothing outstanding: next() would not wait
    core.try_put_index(0)
    assert core.timeout() == Failure(Action.MAIN_TIMEOUT)
    assert core.failed


def _waiting(num_workers: int = 2, **kwargs) -> ProtocolCore:
    """A core inside next(), waiting for task 0 (one task sent to each worker)."""
    core = _core(num_workers, 1, **kwargs)
    while (step := core.next_action()) is not None:
        core.try_put_index(step.worker)
    assert _next(core) is Action.MAIN_GET_DATA
    return core


def test_a_death_seen_at_the_deadline_wins_over_the_timeout():
    """The race of a worker dying as the wait runs out: the port reports both, and the core
    decides the same way every time (the spec's MainTimeout is not enabled while a worker the
    iterator depends on is dead)."""
    core = _waiting()
    core.worker_ended(1)  # reported with the deadline (TimedOut.ended)
    core.deadline_passed()
    step = core.next_action()
    assert step is not None
    assert (step.action, step.worker) == (Action.MAIN_DETECT_WORKER_FAILURE, 1)
    with pytest.raises(ProtocolViolation) as err:
        core.timeout()
    assert "depends on is dead" in str(err.value)
    assert core.detect_worker_failure() == Failure(Action.MAIN_DETECT_WORKER_FAILURE, (1,))


def test_the_deadline_alone_is_a_timeout_and_a_retired_workers_death_does_not_count():
    core = _waiting()
    core.deadline_passed()
    assert core.next_action() == (Action.MAIN_TIMEOUT, None, None, None)
    core = _waiting(iterable=True)
    core.get_data(1, 1, Kind.EXHAUSTED)
    core.mark_worker_as_unavailable(1)  # retired: its death is no failure
    while (step := core.next_action()) is not None and step.action is Action.MAIN_TRY_PUT_INDEX:
        core.try_put_index(step.worker)  # the put due after a retirement
    assert step == (Action.MAIN_GET_DATA, None, None, None)
    core.worker_ended(1)
    core.deadline_passed()
    assert core.next_action() == (Action.MAIN_TIMEOUT, None, None, None)
    assert core.timeout() == Failure(Action.MAIN_TIMEOUT)


def test_call_next_begins_each_call_and_the_step_that_returns_ends_it():
    core = _core(1, 1)
    core.try_put_index(0)
    core.ask(Request.NEXT)
    assert core.next_action() == (Action.MAIN_CALL_NEXT, None, None, None)
    core.call_next()
    assert core.in_call
    with pytest.raises(ProtocolViolation) as err:
        core.call_next()  # one call at a time
    assert "inside a call" in str(err.value)
    assert core.next_action() == (Action.MAIN_GET_DATA, None, None, None)
    core.get_data(0, 0, Kind.DATA, "a")
    core.process_data()
    assert not core.in_call  # next() returned; the refill is between calls
    core.sampler_ran_dry()
    assert _next(core) is Action.MAIN_STOP_ITERATION
    core.stop_iteration()
    assert not core.in_call
    assert _next(core) is Action.MAIN_STOP_ITERATION  # after the end: the call, StopIteration


def test_the_reorder_window_bounds_the_puts_not_the_outstanding_tasks():
    """The spec's MainTryPutIndex guard: tasks sent and not yet handed out or retired (a buffered
    result still holds its slot), fewer than prefetch_factor * num_workers."""
    core = _core(1, 2)
    core.try_put_index(0)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.DATA, "a")
    core.get_data(0, 1, Kind.DATA, "b")
    assert core.tasks_outstanding == 0
    assert core.next_worker() is None
    with pytest.raises(ProtocolViolation) as err:
        core.try_put_index(0)
    assert "reorder window is full" in str(err.value)
    core.process_data()
    assert core.try_put_index(0) == 2  # a hand-out freed one slot


def test_the_pin_threads_death_is_detected_and_fails_stop():
    core = _waiting(pin_memory=True)
    with pytest.raises(ProtocolViolation):
        core.detect_pin_failure()  # not known dead
    core.pin_thread_died("UnloadableError: cannot be unpickled here")
    assert core.next_action() == (Action.MAIN_DETECT_PIN_FAILURE, None, None, None)
    failure = core.detect_pin_failure()
    assert failure == Failure(
        Action.MAIN_DETECT_PIN_FAILURE, (), "UnloadableError: cannot be unpickled here"
    )
    assert (core.phase, core.in_call, core.stage) == (Phase.FAILED, False, Stage.PIN_RUNNING)


def test_a_failed_read_loses_the_result_and_fails_stop():
    core = _waiting()
    before = core.snapshot()
    assert core.recv_error(1, "UnloadableError: no") == Failure(
        Action.FAULT_RECV_ERROR, (1,), "UnloadableError: no"
    )
    assert core.last == (Action.FAULT_RECV_ERROR, 1, None, None)
    # the result is lost (task_info unchanged), the call raised, the shutdown is decided
    failed = {"shutdown": True, "iter_state": "failed", "in_call": False, "failure": "recv"}
    assert core.snapshot() == {**before, **failed}
    assert (core.phase, core.in_call) == (Phase.FAILED, False)
    between = _core(1, 1)
    with pytest.raises(ProtocolViolation) as err:
        between.recv_error(0)
    assert "between calls" in str(err.value)


def test_death_of_a_retired_worker_is_reported_after_resume():
    core = _core(2, 1, persistent_workers=True, iterable=True)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.EXHAUSTED)
    assert core.mark_worker_as_unavailable(0) is False  # persistent: no sentinel
    core.worker_ended(0)
    assert core.dead_dependencies() == []  # retired: not a failure (yet)
    core.ask(Request.RESUME)
    assert core.next_action() == (Action.MAIN_DROP_ITERATOR, None, None, None)
    assert core.drop_iterator() is False  # a break mid-epoch keeps the workers
    assert core.resume_iteration() == [0, 1]
    step = core.next_action()
    assert step is not None
    assert (step.action, step.worker) == (Action.MAIN_DETECT_WORKER_FAILURE, 0)


def test_resume_drops_the_old_epochs_results_then_prefetches():
    core = _core(1, 2, persistent_workers=True)
    core.try_put_index(0)
    core.try_put_index(0)
    core.ask(Request.RESUME)
    core.drop_iterator()
    core.resume_iteration()
    assert core.drain_resume(0, Kind.DATA) is True  # stale: dropped
    assert core.phase is Phase.RESUMING
    assert core.drain_resume(0, Kind.RESUME) is False
    assert core.phase is Phase.RUNNING
    assert (core.epoch, core.send_idx) == (1, 0)
    assert core.request is Request.PREFETCH
    step = core.next_action()
    assert step is not None
    assert step.action is Action.MAIN_TRY_PUT_INDEX


def test_shutdown_order_pin_thread_first():
    core = _core(2, 1, pin_memory=True)
    with pytest.raises(ProtocolViolation):
        core.set_workers_done()  # no shutdown decided yet
    core.ask(Request.SHUTDOWN)
    assert core.next_action() == (Action.MAIN_DROP_ITERATOR, None, None, None)
    assert core.drop_iterator() is True
    assert [a for a in SHUTDOWN_ACTIONS[core.stage]] == [Action.MAIN_SET_PIN_DONE]
    with pytest.raises(ProtocolViolation) as err:
        core.set_workers_done()  # PinThreadExitsFirst
    assert "stage=pin running" in str(err.value)
    taken = []
    while (step := core.next_action()) is not None and step.action is not Action.MAIN_JOIN_WORKER:
        if step.action is Action.MAIN_PUT_SENTINEL:
            with pytest.raises(ProtocolViolation):
                core.join_worker(0)  # sentinels first
        getattr(core, CORE_METHOD[step.action])(*(() if step.worker is None else (step.worker,)))
        taken.append((step.action.value, step.worker))
    assert taken == [
        ("MainSetPinDone", None),
        ("MainJoinPinThread", None),
        ("MainSetWorkersDone", None),
        ("MainPutSentinel", 0),
        ("MainPutSentinel", 1),
    ]
    core.join_worker(0)
    core.terminate_worker(1)
    with pytest.raises(ProtocolViolation):
        core.terminate_worker(1)
    core.join_worker(1)
    assert core.next_action() is None  # shut down


def test_violation_leaves_state_unchanged():
    core = _core(1, 1)
    before = core.snapshot()
    with pytest.raises(ProtocolViolation):
        core.process_data()
    assert core.snapshot() == before
    assert list(before) == list(MAIN_STATE_FIELDS)


def _in_phase(phase: Phase) -> ProtocolCore:
    core = _core(1, 1, persistent_workers=True, iterable=True)
    if phase is Phase.ENDED:
        core.try_put_index(0)
        core.get_data(0, 0, Kind.EXHAUSTED)
        core.mark_worker_as_unavailable(0)
        core.skip_exhausted()
        core.stop_iteration()
    elif phase is Phase.DROPPED:
        core.drop_iterator()
    elif phase is Phase.RESUMING:
        core.drop_iterator()
        core.resume_iteration()
    elif phase is Phase.FAILED:
        core.worker_ended(0)
        core.detect_worker_failure()
    assert core.phase is phase
    return core


_CALLS = {
    Action.MAIN_CALL_NEXT: lambda c: c.call_next(),
    Action.MAIN_DETECT_PIN_FAILURE: lambda c: c.detect_pin_failure(),
    Action.FAULT_RECV_ERROR: lambda c: c.recv_error(0),
    Action.MAIN_TRY_PUT_INDEX: lambda c: c.try_put_index(0),
    Action.MAIN_GET_DATA: lambda c: c.get_data(0, 0, Kind.DATA),
    Action.MAIN_PROCESS_DATA: lambda c: c.process_data(),
    Action.MAIN_SKIP_EXHAUSTED: lambda c: c.skip_exhausted(),
    Action.MAIN_MARK_WORKER_UNAVAILABLE: lambda c: c.mark_worker_as_unavailable(0),
    Action.MAIN_STOP_ITERATION: lambda c: c.stop_iteration(),
    Action.MAIN_DETECT_WORKER_FAILURE: lambda c: c.detect_worker_failure(),
    Action.MAIN_TIMEOUT: lambda c: c.timeout(),
    Action.MAIN_DROP_ITERATOR: lambda c: c.drop_iterator(),
    Action.MAIN_RESUME_ITERATION: lambda c: c.resume_iteration(),
    Action.MAIN_DRAIN_RESUME: lambda c: c.drain_resume(0, Kind.RESUME),
}


@pytest.mark.parametrize("phase", list(Phase))
def test_actions_outside_the_phase_table_are_violations(phase):
    for action, call in _CALLS.items():
        if action in PHASE_TRANSITIONS[phase]:
            continue
        core = _in_phase(phase)
        before = core.snapshot()
        with pytest.raises(ProtocolViolation) as err:
            call(core)
        assert err.value.action is action
        assert core.snapshot() == before
        assert core.phase is phase


@pytest.mark.parametrize("request_", list(Request))
def test_a_request_with_no_row_for_the_phase_is_a_violation(request_):
    for phase in Phase:
        core = _in_phase(phase)
        core.ask(request_)
        if request_ is Request.SHUTDOWN and core.shutdown:
            continue  # answered from the shutdown stage
        if phase in NEXT_ACTIONS[request_]:
            core.next_action()  # answers (a step, or None: served)
            continue
        with pytest.raises(ProtocolViolation) as err:
            core.next_action()
        assert f"{request_.value} is asked in phase={phase.value}" in str(err.value)


# ------------------------------------------------------- whole epochs, through the loop ------
def _first(n: int) -> int:
    return 0


def _last(n: int) -> int:
    return n - 1


def _drain(world: World) -> list[int]:
    """next() until StopIteration (at most 100 times); the handed-out task idxs."""
    got = []
    for _ in range(100):
        try:
            got.append(world.next().idx)
        except StopIteration:
            return got
    raise AssertionError("the epoch never ended")


@pytest.mark.parametrize("choose", [_first, _last])
def test_loop_runs_a_whole_map_epoch(choose):
    world = World(Config(2, 2, True, False, False, num_tasks=7, errors=frozenset({3})), choose)
    world.start_epoch(first=True)
    assert _drain(world) == list(range(7))
    core = world.core
    assert core.shutdown  # StopIteration shut the workers down, through the same loop
    world.let_go()


@pytest.mark.parametrize("choose", [_first, _last])
def test_loop_runs_a_whole_iterable_epoch_with_uneven_shards(choose):
    world = World(Config(3, 2, False, False, True, 0, shards=(0, 4, 1)), choose)
    world.start_epoch(first=True)
    got = _drain(world)
    assert len(got) == 5
    assert world.core.workers_status == [False, False, False]
    world.let_go()


def test_loop_runs_persistent_epochs_broken_off_and_resumed():
    world = World(Config(2, 1, True, True, False, num_tasks=4), _last)
    world.start_epoch(first=True)
    assert [world.next().idx for _ in range(2)] == [0, 1]  # then the user breaks off
    world.start_epoch(first=False)
    assert world.core.epoch == 1
    assert _drain(world) == [0, 1, 2, 3]
    assert not world.core.shutdown  # persistent: the workers wait for the next epoch
    world.start_epoch(first=False)
    assert _drain(world) == [0, 1, 2, 3]
    world.let_go()


def test_loop_fails_stop_when_a_worker_dies():
    world = World(Config(2, 2, True, False, False, num_tasks=8), _first)
    world.start_epoch(first=True)
    world.kill(1)
    with pytest.raises(loop.IteratorFailed) as err:
        _drain(world)
    assert err.value.failure == Failure(Action.MAIN_DETECT_WORKER_FAILURE, (1,))
    assert world.core.stage is Stage.WORKERS_TOLD  # shut down before the error is raised
    with pytest.raises(loop.IteratorFailed) as again:
        world.next()  # fail-stop: the same failure again, reading nothing
    assert again.value.failure is err.value.failure
    world.let_go()


def test_loop_fails_stop_when_the_timeout_runs_out():
    world = World(Config(1, 1, True, False, False, num_tasks=3, timeout=True), _last)
    world.start_epoch(first=True)
    world.hang(0)
    with pytest.raises(loop.IteratorFailed) as err:
        world.next()
    assert err.value.failure == Failure(Action.MAIN_TIMEOUT)
    assert world.core.terminated == [True]  # the hung worker was killed, then reaped
    world.let_go()


def test_loop_reports_a_death_that_raced_the_deadline_not_the_timeout():
    world = World(Config(2, 1, True, False, False, num_tasks=4, timeout=True), _last)
    world.start_epoch(first=True)
    world.hang(0)  # task 0 never comes
    world.kill(1)  # and worker 1 dies: the wait's last choice is the deadline, with the death
    with pytest.raises(loop.IteratorFailed) as err:
        world.next()
    assert err.value.failure == Failure(Action.MAIN_DETECT_WORKER_FAILURE, (1,))
    world.let_go()


def test_loop_fails_stop_on_a_failed_read():
    world = World(Config(2, 1, True, False, False, num_tasks=4), _last)
    world.recv_error_budget = 1
    world.start_epoch(first=True)
    with pytest.raises(loop.IteratorFailed) as err:
        world.next()
    assert err.value.failure.action is Action.FAULT_RECV_ERROR
    with pytest.raises(loop.IteratorFailed):
        world.next()
    world.let_go()


def test_loop_fails_stop_when_the_pin_thread_dies():
    world = World(Config(1, 2, True, False, False, num_tasks=4, pin_memory=True), _first)
    world.pin_death_budget = 1
    world.start_epoch(first=True)
    world.worker_step(0)
    world.pin_dies(0)
    with pytest.raises(loop.IteratorFailed) as err:
        world.next()
    assert err.value.failure == Failure(Action.MAIN_DETECT_PIN_FAILURE, (), "simulated")
    assert world.core.stage is Stage.WORKERS_TOLD  # the dead thread was joined first
    world.let_go()


def test_the_loop_takes_call_next_first_in_every_next(tmp_path):
    world = World(Config(1, 1, True, False, False, num_tasks=1), _first)
    with tracewriter.trace_to(tmp_path):
        world.start_epoch(first=True)
        _drain(world)
        with pytest.raises(StopIteration):
            world.next()
    lines = (tmp_path / TRACE_FILE.format(pid=os.getpid())).read_text().splitlines()
    actions = [json.loads(line)["action"] for line in lines]
    calls = [i for i, a in enumerate(actions) if a == "MainCallNext"]
    assert len(calls) == 3  # a batch, StopIteration, StopIteration again
    assert [actions[i + 1] for i in calls] == ["MainGetData"] + ["MainStopIteration"] * 2


def test_take_writes_the_record_of_the_step_the_core_took(tmp_path):
    core = _core(2, 1)
    with tracewriter.trace_to(tmp_path):
        idx = loop.take(core, Action.MAIN_TRY_PUT_INDEX, 0)
        loop.take(core, Action.MAIN_GET_DATA, 0, idx, Kind.DATA, "a")
        with pytest.raises(ProtocolViolation):
            loop.take(core, Action.MAIN_GET_DATA, 1, idx, Kind.DATA, "a")  # nothing written
    lines = (tmp_path / TRACE_FILE.format(pid=os.getpid())).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["action"], r["worker"], r["task"], r.get("kind")) for r in records] == [
        ("MainTryPutIndex", 0, 0, None),
        ("MainGetData", 0, 0, "data"),
    ]
    assert records[-1]["state"] == core.snapshot()
    assert records[-1]["actor"] == "Main"


def test_take_writes_a_failed_read_as_the_fault_record_with_the_main_state(tmp_path):
    core = _waiting()
    with tracewriter.trace_to(tmp_path):
        loop.take(core, Action.FAULT_RECV_ERROR, 0, "UnloadableError: no")
    (line,) = (tmp_path / TRACE_FILE.format(pid=os.getpid())).read_text().splitlines()
    record = json.loads(line)
    assert (record["actor"], record["action"], record["worker"]) == ("Fault", "FaultRecvError", 0)
    assert record["state"] == core.snapshot()


# ---------------------------------------------------------------- what the core is -----------
@pytest.mark.parametrize(
    "module",
    [
        "loaderspec.reference.core",
        "loaderspec.reference.transitions",
        "loaderspec.reference.guards",
        "loaderspec.reference.proposals",
        "loaderspec.reference.steps",
        "loaderspec.reference.loop",
        "loaderspec.reference.messages",
        "loaderspec.reference.worker_core",
    ],
)
def test_the_pure_modules_do_not_import_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", f"import {module} imported torch"


def _core_calls(path: Path) -> list[str]:
    """Calls in ``path`` of a core method or query by name (``x.try_put_index(...)``)."""
    names = set(CORE_METHOD.values()) | set(OBSERVED_FAULT_METHOD.values())
    names |= {"next_action", "ask", "worker_ended", "sampler_ran_dry"}
    names |= {"pin_thread_died", "deadline_passed"}
    tree = ast.parse(path.read_text(), str(path))
    return sorted(
        f"{node.func.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "tracewriter")
    )


def test_the_shell_makes_no_protocol_decision():
    """The shell never calls the core: ``reference.loop`` does, for it and for the test model."""
    shell = REFERENCE / "shell.py"
    assert _core_calls(shell) == []
    text = shell.read_text()
    for used in ("loop.start_epoch(", "loop.next_batch(", "loop.shut_down(", "loop.reap("):
        assert used in text
    model = Path(__file__).with_name("refcore_model.py").read_text()
    for used in ("loop.start_epoch(", "loop.next_batch(", "loop.shut_down("):
        assert used in model
    assert "next_action()" not in model  # (it asks each simulated worker's own core)


def test_the_no_decision_check_finds_a_core_call(tmp_path):
    bad = tmp_path / "shell.py"
    bad.write_text("def f(self):\n    self._core.try_put_index(0)\n")
    assert _core_calls(bad) == ["try_put_index (line 2)"]


# ------------------------------------------------------------------- Hypothesis -------------
@st.composite
def configs(draw: st.DrawFn) -> Config:
    nw = draw(st.integers(1, 3))
    iterable = draw(st.booleans())
    return Config(
        num_workers=nw,
        prefetch_factor=draw(st.integers(1, 3)),
        in_order=draw(st.booleans()),
        persistent=draw(st.booleans()),
        iterable=iterable,
        num_tasks=0 if iterable else draw(st.integers(0, 9)),
        shards=tuple(draw(st.integers(0, 4)) for _ in range(nw)) if iterable else (),
        errors=frozenset(draw(st.sets(st.integers(0, 9), max_size=2))),
        pin_memory=draw(st.booleans()),
        timeout=draw(st.booleans()),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=configs(),
    data=st.data(),
    kills=st.integers(0, 1),
    hangs=st.integers(0, 1),
    read_faults=st.integers(0, 1),
    epochs=st.integers(1, 3),
)
def test_interleavings_keep_the_spec_invariants(cfg, data, kills, hangs, read_faults, epochs):
    """Every interleaving of worker steps and reads, with a fault schedule: a worker killed or
    hung at any point (a hang only with a timeout: IterationTerminates assumes one), the timeout
    expiring during any wait (with the deaths seen by then), a read that fails (the pin thread
    dies on it, with pin memory), persistent epochs broken off at any point."""

    def choose(n: int) -> int:
        return data.draw(st.integers(0, n - 1))

    world = World(cfg, choose)
    world.kill_budget = kills
    world.hang_budget = hangs if cfg.timeout else 0
    world.recv_error_budget = 0 if cfg.pin_memory else read_faults
    world.pin_death_budget = read_faults if cfg.pin_memory else 0
    core = world.core
    for epoch in range(epochs if cfg.persistent else 1):
        # A persistent epoch may be broken off after a few batches (then resumed).
        limit = data.draw(st.integers(0, 12)) if cfg.persistent else 10**6
        try:
            world.start_epoch(first=epoch == 0)
            for _ in range(limit):
                world.next()
        except StopIteration:
            pass
        except loop.IteratorFailed:
            assert core.failed
            with pytest.raises(loop.IteratorFailed):  # fail-stop: nothing more is handed out
                world.next()
            world.let_go()
            return
        world.check()
    world.let_go()


@settings(max_examples=150, deadline=None)
@given(cfg=configs(), data=st.data())
def test_fault_free_epoch_hands_out_every_task_once(cfg, data):
    world = World(replace(cfg, timeout=False), lambda n: data.draw(st.integers(0, n - 1)))
    world.start_epoch(first=True)
    got = _drain(world)
    if not cfg.iterable:
        assert sorted(got) == list(range(cfg.num_tasks))
    else:
        assert len(got) == sum(cfg.shards)
    if cfg.in_order:
        assert got == sorted(got)
    world.let_go()
