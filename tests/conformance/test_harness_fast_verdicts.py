"""A loader that shows the same fault in its first cases gets its later verdicts in seconds:
workers alive after a dropped iterator (the drop wait shrinks after the first full one) and a
hang before the first batch (the deadline shrinks after two). The sandbox is replaced by a
recorder of the plans and deadlines it is handed, so no loader runs."""

from __future__ import annotations

from typing import Any

import pytest
from loaderspec.conformance.harness import checks, scenario
from loaderspec.conformance.harness.grading import MUST_BOUND_S, Grade, Violation
from loaderspec.faultinject.driver import Plan, Run
from loaderspec.faultinject.events import AliveAfterDrop, Built
from loaderspec.faultinject.sandbox import SandboxReport


class Leaky:
    """Stands for a loader class: the harness keys what it learned by module and name."""


class Hangs:
    pass


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Plan, float]]:
    """Each run's plan and deadline; the run it returns is set by the test (`outcome`)."""
    handed: list[tuple[Plan, float]] = []
    monkeypatch.setattr(scenario, "_ALIVE_AFTER_DROP", {})
    monkeypatch.setattr(scenario, "_HUNG_AT_START", {})
    monkeypatch.setattr(scenario.loaders, "iterator_start_s", lambda cls: 0.0)
    return handed


LINGER: list[Any] = []  # each run's linger_by_type


def _runner(handed: list[tuple[Plan, float]], make: Any) -> Any:
    def run(loader_cls: type, plan: Plan, *, deadline_s: float, **kwargs: Any) -> Run:
        handed.append((plan, deadline_s))
        LINGER.append(kwargs.get("linger_by_type"))
        return make(plan, deadline_s)

    return run


def test_workers_left_after_a_drop_shorten_the_later_drop_waits(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def leaked(plan: Plan, deadline_s: float) -> Run:
        built = Built(None, 0.0, 0.0, ref="x:Leaky")
        alive = AliveAfterDrop(0, 1.0, plan.drop_wait_s, pids=(123,))
        return Run(plan, SandboxReport(outcome="returned"), events=[built, alive])

    monkeypatch.setattr(scenario, "run", _runner(sandbox, leaked))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_a.py::test_first (call)")
    LINGER.clear()
    scenario.play(Leaky, Plan())
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_a.py::test_second (call)")
    r = scenario.play(Leaky, Plan())
    assert [p.drop_wait_s for p, _ in sandbox] == [MUST_BOUND_S, scenario.LEAK_WAIT_AFTER_LEAK_S]
    # ...and what the workers leave after the loader's drop is waited for as briefly.
    key = scenario.loader_key(Leaky)
    assert [(x or {}).get(key) for x in LINGER] == [None, scenario.LEAK_WAIT_AFTER_LEAK_S]
    with pytest.raises(Violation) as failed:
        checks.nothing_left(Grade(), r)
    assert scenario.ALIVE_PATTERN in str(failed.value.msg)
    assert "test_a.py::test_first" in str(failed.value.msg)


def test_a_loader_that_hangs_before_its_first_batch_gets_short_deadlines_after_two_cases(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def hung(plan: Plan, deadline_s: float) -> Run:
        built = Built(None, 0.0, 0.0, ref="x:Hangs")
        return Run(plan, SandboxReport(outcome="deadline", elapsed_s=deadline_s), events=[built])

    monkeypatch.setattr(scenario, "run", _runner(sandbox, hung))
    messages = []
    for case in ("test_one", "test_two", "test_three"):
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"test_h.py::{case} (call)")
        with pytest.raises(Violation) as failed:
            scenario.play(Hangs, Plan(), deadline_s=20.0)
        messages.append(str(failed.value.msg))
    assert [d for _, d in sandbox] == [20.0, 20.0, scenario.HUNG_DEADLINE_S]
    assert scenario.HUNG_PATTERN not in messages[1]
    assert scenario.HUNG_PATTERN in messages[2]
    assert "test_h.py::test_one and test_h.py::test_two" in messages[2]


def test_a_loader_that_started_is_never_given_the_short_deadline(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow scenario that got past iter() (a batch came) is not the hang pattern."""
    from loaderspec.faultinject.events import Batch

    def slow(plan: Plan, deadline_s: float) -> Run:
        events = [Built(None, 0.0, 0.0, ref="x:Hangs"), Batch(0, 1.0, 1.0, value=[0])]
        return Run(plan, SandboxReport(outcome="deadline", elapsed_s=deadline_s), events=events)

    monkeypatch.setattr(scenario, "run", _runner(sandbox, slow))
    for _ in range(3):
        with pytest.raises(Violation):
            scenario.play(Hangs, Plan(), deadline_s=20.0)
    assert [d for _, d in sandbox] == [20.0, 20.0, 20.0]


def test_processes_left_after_the_loaders_drop_shorten_the_later_drop_waits_too(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers still alive after the loader was dropped (the sandbox's `lingering`) are the
    same cause as workers alive after a dropped iterator: one full wait for both."""

    def lingered(plan: Plan, deadline_s: float) -> Run:
        built = Built(None, 0.0, 0.0, ref=scenario.loader_key(Leaky))
        return Run(plan, SandboxReport(outcome="returned", lingering=[123]), events=[built])

    monkeypatch.setattr(scenario, "_LEAKED", {})
    monkeypatch.setattr(scenario, "run", _runner(sandbox, lingered))
    scenario.play(Leaky, Plan())
    scenario.play(Leaky, Plan())
    assert [p.drop_wait_s for p, _ in sandbox] == [MUST_BOUND_S, scenario.LEAK_WAIT_AFTER_LEAK_S]


def test_a_short_deadline_that_saw_the_loader_start_is_played_again_in_full(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader in the hang pattern that gets past iter() under the short deadline is slow, not
    hung: the pattern is forgotten and the scenario is played again with its whole deadline, so
    the short deadline never fails a loader that starts."""
    from loaderspec.faultinject.events import Batch, Stop

    def starts_late(plan: Plan, deadline_s: float) -> Run:
        built = Built(None, 0.0, 0.0, ref="x:Hangs")
        if deadline_s < 20.0:  # the short deadline: it started, but it was not enough
            batch = Batch(0, 1.0, 1.0, value=[0])
            return Run(
                plan, SandboxReport(outcome="deadline", elapsed_s=deadline_s), [built, batch]
            )
        events = [built, Batch(0, 1.0, 1.0, value=[0]), Stop(0, 2.0, 0.0)]
        return Run(plan, SandboxReport(outcome="returned"), events)

    key = scenario.loader_key(Hangs)
    scenario._HUNG_AT_START[key] = ["test_h.py::test_one", "test_h.py::test_two"]
    monkeypatch.setattr(scenario, "run", _runner(sandbox, starts_late))
    r = scenario.play(Hangs, Plan(), deadline_s=20.0)
    assert r.report is not None
    assert r.report.outcome == "returned"
    assert [d for _, d in sandbox] == [scenario.HUNG_DEADLINE_S, 20.0]
    assert scenario.hung_at_start(Hangs) == []


def test_the_resume_cases_and_the_worker_probe_share_the_hang_pattern(
    sandbox: list[tuple[Plan, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume scenario with no step at all is a hang at iter(), ended within a plain
    scenario's deadline (not its own 40 s) and counted with the plain ones; once the pattern
    holds, resume scenarios and the worker probe get the short deadline too."""
    from loaderspec.conformance.harness import resume as harness_resume
    from loaderspec.faultinject import driver
    from loaderspec.faultinject.plan import Cut, ResumePlan

    calls: list[tuple[float, float | None]] = []

    def hung_resume(loader_cls: type, plan: ResumePlan, **kw: Any) -> Run:
        calls.append((kw["deadline_s"], kw.get("first_event_s")))
        report = SandboxReport(outcome="deadline", elapsed_s=kw["first_event_s"])
        return Run(plan, report, [])

    def hung(plan: Plan, deadline_s: float) -> Run:
        built = Built(None, 0.0, 0.0, ref="x:Hangs")
        return Run(plan, SandboxReport(outcome="deadline", elapsed_s=deadline_s), events=[built])

    probes: list[float] = []
    monkeypatch.setattr(harness_resume.driver, "run", hung_resume)
    monkeypatch.setattr(harness_resume.loaders, "stateful", lambda cls: True)
    monkeypatch.setattr(scenario, "run", _runner(sandbox, hung))
    monkeypatch.setattr(driver, "_PROBED", {})
    monkeypatch.setattr(driver, "probe_workers", lambda cls, s: probes.append(s) or "processes")
    plan = ResumePlan(n=4, cuts=(Cut(epoch=0, after=1),))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_r.py::test_resume (call)")
    with pytest.raises(Violation) as first:
        harness_resume.play_resume(Hangs, plan)
    assert "without a first batch or state" in str(first.value.msg)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_p.py::test_plain (call)")
    with pytest.raises(Violation):
        scenario.play(Hangs, Plan(), deadline_s=20.0)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_r.py::test_resume_again (call)")
    with pytest.raises(Violation) as later:
        harness_resume.play_resume(Hangs, plan)
    assert calls[0] == (harness_resume.RESUME_DEADLINE_S, scenario.DEADLINE_S)
    assert calls[1][0] == scenario.HUNG_DEADLINE_S
    assert scenario.HUNG_PATTERN in str(later.value.msg)
    assert "test_r.py::test_resume and test_p.py::test_plain" in str(later.value.msg)
    assert scenario.workers(Hangs) == "processes"
    assert probes == [scenario.HUNG_DEADLINE_S]
