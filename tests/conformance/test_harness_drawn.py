"""The drawn cases' own pieces: torch's answer for a configuration, the configurations and fault
schedules drawn, without any loader run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from conformance.harness import batching, schedules
from conformance.harness.batching import Config, torch_epochs


def _tensors(*rows: list[int]) -> list[dict]:
    return [{"tensor": r, "dtype": "int64"} for r in rows]


def test_torch_answer_iterable_batches_per_worker_round_robin():
    cfg = Config(shards=(3, 1, 4), n=0, batch_size=2, workers=2, drop_last=False)
    epochs, seeds = torch_epochs(cfg)
    # worker 0 reads shards 0 and 2, worker 1 shard 1: batched on their own, then round robin.
    w0 = [[0, 1], [2, 2_000_000], [2_000_001, 2_000_002], [2_000_003]]
    assert epochs == [_tensors(w0[0], [1_000_000], *w0[1:])]
    assert len(seeds) == 1


def test_torch_answer_without_batching_and_with_a_custom_collate():
    epochs, _ = torch_epochs(Config(n=3, batch_size=None, custom_collate=True))
    assert epochs == [[{"dict": [["items", [i]], ["size", 1]]} for i in range(3)]]


def test_persistent_workers_draw_one_base_seed():
    cfg = Config(n=4, sampling="shuffle_seeded", seed=3, workers=2, persistent=True, epochs=3)
    assert len(torch_epochs(cfg)[1]) == 1
    assert len(torch_epochs(Config(n=4, workers=2, epochs=3))[1]) == 3


@pytest.mark.parametrize("cfg", batching.QUICK_PICKS + batching.MORE_PICKS)
def test_the_picks_are_configurations_torch_accepts(cfg: Config):
    assert torch_epochs(cfg)[0]
    assert str(cfg).startswith("DataLoader(")


@settings(max_examples=40, deadline=None, database=None)
@given(batching.configs())
def test_drawn_configurations_are_ones_torch_accepts(cfg: Config):
    epochs, _ = torch_epochs(cfg)
    assert len(epochs) == cfg.epochs


@settings(max_examples=40, deadline=None, database=None)
@given(schedules.schedules("threads"))
def test_thread_workers_get_no_kills(schedule: schedules.Schedule):
    assert not schedule.fault.startswith("die")
    assert schedule.fault != "parent_kill" or schedule.at <= schedule.n


@pytest.mark.parametrize("fault", schedules.FAULTS)
def test_every_fault_makes_a_plan(fault: str):
    plan = schedules.Schedule(fault=fault, at=2).plan()
    assert (fault == "parent_kill") == bool(plan.leave)
    assert (fault == "hang") == ("timeout" in plan.kwargs)


def test_a_deadline_message_reads_the_last_timed_event():
    """A scenario past its deadline fails its MUST naming the last events (every event is
    timed: its class has `t`)."""
    from conformance.harness import scenario
    from faultinject.driver import Plan, Run
    from faultinject.events import Batch, Stop
    from faultinject.sandbox import SandboxReport

    events = [Batch(0, 0.0, 0.0, value=[0]), Stop(0, 0.1, 0.0)]
    r = Run(Plan(n=1), SandboxReport(outcome="deadline", elapsed_s=20.0), list(events))
    with pytest.raises(pytest.fail.Exception, match=r"last events: batch, stop; nothing more"):
        scenario._deadline_passed(r, 20.0, "IterationTerminates")
