"""The drawn cases' own pieces: torch's answer for a configuration, the configurations and fault
schedules drawn, without any loader run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from loaderspec.conformance.harness import batching, schedules
from loaderspec.conformance.harness.batching import Config, torch_epochs


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
def test_thread_workers_get_no_kills(schedule: schedules.DrawnFault):
    assert not schedule.fault.startswith("die")
    assert schedule.fault != "parent_kill" or schedule.at <= schedule.n


@pytest.mark.parametrize("fault", schedules.FAULTS)
def test_every_fault_makes_a_plan(fault: str):
    plan = schedules.DrawnFault(fault=fault, at=2).plan()
    assert (fault == "parent_kill") == bool(plan.leave)
    assert (fault == "hang") == ("timeout" in plan.kwargs)


def test_a_deadline_message_reads_the_last_timed_event():
    """A scenario past its deadline fails its MUST naming the last events (every event is
    timed: its class has `t`)."""
    from loaderspec.conformance.harness import scenario
    from loaderspec.faultinject.driver import Plan, Run
    from loaderspec.faultinject.events import Batch, Stop
    from loaderspec.faultinject.sandbox import SandboxReport

    events = [Batch(0, 0.0, 0.0, value=[0]), Stop(0, 0.1, 0.0)]
    r = Run(Plan(n=1), SandboxReport(outcome="deadline", elapsed_s=20.0), list(events))
    with pytest.raises(pytest.fail.Exception, match=r"last events: batch, stop; nothing more"):
        scenario._deadline_passed(r, 20.0, "IterationTerminates")


def _played(examples: int, picks: tuple[Config, ...]) -> list[Config]:
    """The configurations a drawn case plays (its picks, then the derandomized draws)."""
    from loaderspec.conformance.harness.drawn import check_drawn

    seen: list[Config] = []
    check_drawn(batching.configs(), seen.append, examples=examples, picks=picks, shrink_s=0)
    return seen


# What the batching cases' configurations must cover, with data to play it on (issue 25: the
# fixed-seed draws once gave n=0 to every batch_size=None configuration).
MUST_COVER = {
    "map",
    "iterable",
    "batch_size=None, default collate",
    "batch_size=None, custom collate",
    "batched, default collate",
    "batched, custom collate",
    "sampling=batch_sampler",
    "sampling=sampler",
    "sampling=shuffle_seeded",
    "persistent epochs",
    "abandoned persistent iterable epoch",
}


@pytest.mark.parametrize(
    ("examples", "picks", "wanted"),
    [
        (
            2,
            batching.QUICK_PICKS,
            MUST_COVER - {"batch_size=None, custom collate"},
        ),
        (10, batching.MORE_PICKS, MUST_COVER),
    ],
    ids=["quick", "more"],
)
def test_the_played_configurations_are_not_degenerate(examples, picks, wanted):
    """Every collate path on non-empty data, a custom batch_sampler, a seeded shuffle, persistent
    epochs and an abandoned iterable epoch (one that torch gives more batches than it leaves
    after) are played; len() is compared in every one; the draws are printed."""
    played = _played(examples, picks)
    covered: dict[str, int] = {}
    for cfg in played:
        print(cfg)
        assert cfg.plan().len_of_loader
        parts = cfg.covers()
        if cfg.abandon is not None and len(torch_epochs(cfg)[0][0]) <= cfg.abandon:
            parts.discard("abandoned persistent iterable epoch")
        for part in parts:
            covered[part] = covered.get(part, 0) + 1
    print(covered)
    assert "empty" not in covered
    assert wanted <= set(covered), sorted(wanted - set(covered))


def test_the_drawn_fault_schedules_cover_every_fault():
    """The derandomized draws of the drawn fault cases (the quick one's 3, the whole suite's 10)
    play every fault kind for worker processes, a kill between persistent epochs included."""
    from loaderspec.conformance.harness.drawn import MORE_EXAMPLES, QUICK_EXAMPLES, check_drawn

    seen: list[schedules.DrawnFault] = []
    for examples in (QUICK_EXAMPLES + 1, MORE_EXAMPLES):
        strategy, picks = schedules.schedules("processes"), schedules.picks("processes")
        check_drawn(strategy, seen.append, examples=examples, picks=picks, shrink_s=0)
    for s in seen:
        print(s.fault, s.at, s.n, s.workers)
    assert {s.fault for s in seen} == set(schedules.FAULTS)


def test_a_known_hang_ends_the_draws_at_once():
    """A drawn example that failed as the hang pattern (the loader already hung at iter() in
    earlier cases) is the case's FAIL at once: no more draws, no shrinking, no replays."""
    from hypothesis import strategies as st
    from loaderspec.conformance.harness import scenario
    from loaderspec.conformance.harness.drawn import check_drawn
    from loaderspec.conformance.harness.grading import Violation, fail

    from loaderspec.vocabulary import PropertyName

    seen: list[int] = []

    def hangs(x: int) -> None:
        seen.append(x)
        note = f"killed ({scenario.HUNG_PATTERN} in test_a and test_b: a deadline of 1 s)"
        fail(PropertyName.ITERATION_TERMINATES, "the scenario to end within 1 s", note)

    with pytest.raises(Violation) as failed:
        check_drawn(st.integers(0, 9), hangs, examples=10)  # shrinking on
    assert len(seen) == 1
    assert f"drawn: {seen[0]}" in str(failed.value.msg)


def test_a_recorded_draw_is_played_alone():
    """`--conformance-replay-draw`'s draw: check_drawn plays that example once and draws none;
    its failure says so and carries the example; a text that is not a draw is one clear error."""
    from hypothesis import strategies as st
    from loaderspec.conformance.harness import draws
    from loaderspec.conformance.harness.drawn import MSG_REPLAYED, check_drawn

    example = schedules.DrawnFault(fault="hang", at=2)
    text = draws.encode("test_x.py::test_y", example)
    assert draws.decode(text) == draws.Draw("test_x.py::test_y", example)
    seen: list[object] = []
    draws.replay(draws.decode(text))
    try:
        assert check_drawn(st.integers(), seen.append, examples=5) == example
        assert seen == [example]

        def lost(x: object) -> None:
            pytest.fail("item 2 never handed out", pytrace=False)

        with pytest.raises(pytest.fail.Exception) as failed:
            check_drawn(st.integers(), lost, examples=5)
        assert MSG_REPLAYED in str(failed.value.msg)
        assert getattr(failed.value, draws.DRAW_ATTR) == example
    finally:
        draws.replay(None)
    for bad in ("not-a-draw", text[:-5], ""):
        with pytest.raises(ValueError, match="not a draw this suite recorded"):
            draws.decode(bad)
