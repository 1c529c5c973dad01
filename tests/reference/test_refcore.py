"""The pure protocol core, driven by events only (no processes): units and Hypothesis runs.

Hypothesis draws a configuration, then every interleaving choice (which worker steps, which
result the main process reads, whether and when a worker is killed or hangs, when the timeout
expires, where an epoch is broken off); ``refcore_model.World`` checks the spec's invariants
after each step.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refcore_model import Config, Failed, World

from loaderspec.vocabulary import CORE_METHOD, Action
from reference.core import PHASE_TRANSITIONS, Kind, Phase, ProtocolCore, ProtocolViolation


def test_every_main_action_has_its_core_method():
    for action, name in CORE_METHOD.items():
        assert callable(getattr(ProtocolCore, name)), f"{action.value} -> {name}"


def test_try_put_index_round_robin_and_prefetch_bound():
    core = ProtocolCore(2, 2)
    sent = []
    while (w := core.next_worker()) is not None:
        sent.append((core.try_put_index(w), w))
    assert sent == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert core.tasks_outstanding == core.max_tasks == 4
    with pytest.raises(ProtocolViolation) as err:
        core.try_put_index(0)
    assert err.value.action is Action.MAIN_TRY_PUT_INDEX
    assert "prefetch bound" in str(err.value)
    assert err.value.state["send_idx"] == 4


def test_in_order_buffers_out_of_order_results():
    core = ProtocolCore(2, 1)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(1, 1, Kind.DATA, "b")
    assert core.next_action() is Action.MAIN_GET_DATA  # task 0 first
    assert core.task_info == {0: [0, False], 1: [1, True]}
    core.get_data(0, 0, Kind.DATA, "a")
    assert [core.process_data().payload, core.process_data().payload] == ["a", "b"]
    assert core.next_action() is Action.MAIN_STOP_ITERATION


def test_out_of_order_hands_out_on_arrival_then_skips_the_slot():
    core = ProtocolCore(2, 1, in_order=False)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(1, 1, Kind.DATA, "b")
    assert core.process_data().idx == 1
    assert core.rcvd_idx == 0
    core.get_data(0, 0, Kind.DATA, "a")
    assert core.process_data().idx == 0
    assert core.next_action() is Action.MAIN_SKIP_EXHAUSTED
    core.skip_exhausted()
    assert core.next_action() is Action.MAIN_STOP_ITERATION


def test_exhausted_worker_is_retired_with_its_queued_tasks():
    core = ProtocolCore(1, 2, iterable=True)
    core.try_put_index(0)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.EXHAUSTED)
    assert core.next_action() is Action.MAIN_MARK_WORKER_UNAVAILABLE
    assert core.mark_worker_as_unavailable(0) is True  # not persistent: send the sentinel
    assert core.next_worker() is None
    core.skip_exhausted()  # slot 0 (dropped by the mark)
    core.skip_exhausted()  # slot 1 (the worker skips it)
    assert core.tasks_outstanding == 0
    assert core.retired == {0, 1}
    assert core.stop_iteration() is True


def test_exhausted_is_a_violation_for_map_datasets():
    core = ProtocolCore(1, 1)
    core.try_put_index(0)
    with pytest.raises(ProtocolViolation):
        core.get_data(0, 0, Kind.EXHAUSTED)
    assert core.tasks_outstanding == 1  # unchanged


def test_fail_stop_after_worker_death():
    core = ProtocolCore(2, 1)
    core.try_put_index(0)
    core.try_put_index(1)
    core.get_data(0, 0, Kind.DATA, "a")
    core.detect_worker_failure([1])
    assert core.failed
    assert core.shutdown
    with pytest.raises(ProtocolViolation):
        core.next_action()
    with pytest.raises(ProtocolViolation):
        core.process_data()


def test_death_of_a_retired_worker_is_reported_after_resume():
    core = ProtocolCore(2, 1, persistent_workers=True, iterable=True)
    core.try_put_index(0)
    core.get_data(0, 0, Kind.EXHAUSTED)
    assert core.mark_worker_as_unavailable(0) is False  # persistent: no sentinel
    assert not core.depends_on(0)
    assert core.drop_iterator() is False  # a break mid-epoch keeps the workers
    assert core.resume_iteration() == [0, 1]
    assert core.depends_on(0)


def test_resume_drops_the_old_epochs_results():
    core = ProtocolCore(1, 2, persistent_workers=True)
    core.try_put_index(0)
    core.try_put_index(0)
    core.drop_iterator()
    core.resume_iteration()
    assert core.drain_resume(0, Kind.DATA) is True  # stale: dropped
    assert core.phase is Phase.RESUMING
    assert core.drain_resume(0, Kind.RESUME) is False
    assert core.phase is Phase.RUNNING
    assert core.epoch == 1
    assert core.send_idx == 0


def test_shutdown_order_pin_thread_first():
    core = ProtocolCore(2, 1, pin_memory=True)
    with pytest.raises(ProtocolViolation):
        core.set_workers_done()  # no shutdown decided yet
    assert core.drop_iterator() is True
    with pytest.raises(ProtocolViolation) as err:
        core.set_workers_done()  # PinThreadExitsFirst
    assert "pin thread" in str(err.value)
    core.set_pin_done()
    with pytest.raises(ProtocolViolation):
        core.put_sentinel(0)
    core.join_pin_thread()
    core.set_workers_done()
    with pytest.raises(ProtocolViolation):
        core.join_worker(0)  # sentinels first
    for w in core.needs_sentinel():
        core.put_sentinel(w)
    core.join_worker(0)
    core.terminate_worker(1)
    with pytest.raises(ProtocolViolation):
        core.terminate_worker(1)


def test_violation_leaves_state_unchanged():
    core = ProtocolCore(1, 1)
    before = core.snapshot()
    with pytest.raises(ProtocolViolation):
        core.process_data()
    assert core.snapshot() == before


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
    epochs=st.integers(1, 3),
)
def test_interleavings_keep_the_spec_invariants(cfg, data, kills, hangs, epochs):
    """Every interleaving of worker steps and reads, with a fault schedule: a worker killed or
    hung at any point (a hang only with a timeout: IterationTerminates assumes one), the timeout
    expiring during any wait, persistent epochs broken off at any point."""

    def choose(n: int) -> int:
        return data.draw(st.integers(0, n - 1))

    world = World(cfg, choose)
    world.kill_budget = kills
    world.hang_budget = hangs if cfg.timeout else 0
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
        except Failed:
            assert core.failed
            with pytest.raises(ProtocolViolation):  # fail-stop: nothing more is handed out
                core.next_action()
            world.shutdown()
            return
        world.check()
    world.shutdown()


@settings(max_examples=150, deadline=None)
@given(cfg=configs(), data=st.data())
def test_fault_free_epoch_hands_out_every_task_once(cfg, data):
    world = World(replace(cfg, timeout=False), lambda n: data.draw(st.integers(0, n - 1)))
    world.start_epoch(first=True)
    got = []
    for _ in range(100):
        try:
            got.append(world.next().idx)
        except StopIteration:
            break
    else:
        pytest.fail("the epoch never ended")
    if not cfg.iterable:
        assert sorted(got) == list(range(cfg.num_tasks))
    else:
        assert len(got) == sum(cfg.shards)
    if cfg.in_order:
        assert got == sorted(got)


def _in_phase(phase: Phase) -> ProtocolCore:
    core = ProtocolCore(1, 1, persistent_workers=True, iterable=True)
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
        core.detect_worker_failure([0])
    assert core.phase is phase
    return core


_CALLS = {
    Action.MAIN_TRY_PUT_INDEX: lambda c: c.try_put_index(0),
    Action.MAIN_GET_DATA: lambda c: c.get_data(0, 0, Kind.DATA),
    Action.MAIN_PROCESS_DATA: lambda c: c.process_data(),
    Action.MAIN_SKIP_EXHAUSTED: lambda c: c.skip_exhausted(),
    Action.MAIN_MARK_WORKER_UNAVAILABLE: lambda c: c.mark_worker_as_unavailable(0),
    Action.MAIN_STOP_ITERATION: lambda c: c.stop_iteration(),
    Action.MAIN_DETECT_WORKER_FAILURE: lambda c: c.detect_worker_failure([0]),
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
