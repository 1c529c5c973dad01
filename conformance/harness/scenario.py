"""Play a scenario against the loader under test, as a conformance case: `play(loader_cls, ...)`.

A scenario is a `faultinject.driver.Plan` played in faultinject's sandbox. What a case cannot
judge becomes the case's outcome here, once for every case: a loader that cannot express the
configuration is a SKIP with its reason; a scenario still running at its deadline is a FAIL of
the case's MUST property, naming the last events and how long nothing more happened; a scenario
that raised outside the loader's calls, or a loader process that died on its own, fails the case.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from conformance.harness.grading import fail
from faultinject import loaders
from faultinject.driver import Plan, Run, run

__all__ = ["DEADLINE_S", "kwargs", "play", "shutdown_s"]

DEADLINE_S = 30.0  # per scenario: 2 x the 15 s MUST bound; a correct loader needs a few seconds


def _deadline_passed(r: Run, deadline_s: float, must: str) -> None:
    done = ", ".join(e["kind"] for e in r.events[-5:]) or "nothing"
    assert r.report is not None
    # Event times are CLOCK_MONOTONIC in the child, the same clock as here.
    waited = time.monotonic() - r.events[-1]["t"] if r.events else r.report.elapsed_s
    fail(
        must,
        f"the scenario to end within {deadline_s:g} s",
        f"still running at the deadline (last events: {done}; nothing more for "
        f"{waited:.1f} s); killed",
    )


def play(
    loader_cls: type,
    plan: Plan | None = None,
    *,
    deadline_s: float = DEADLINE_S,
    must: str = "IterationTerminates",
    parent_dies: bool = False,
    orphan_grace_s: float = 1.0,
    **fields: Any,
) -> Run:
    """Play `plan` (or `Plan(**fields)`) against `loader_cls` in a sandbox and return the `Run`.

    Skips the case when the loader refuses the configuration (`faultinject.loaders`); fails it
    as a violation of `must` when the scenario outlives `deadline_s`; fails it when the scenario
    raised outside the loader's calls, or when the loader's process died (unless the plan kills
    it: `parent_dies`).
    """
    plan = Plan(**fields) if plan is None else plan
    r = run(loader_cls, plan, deadline_s=deadline_s, orphan_grace_s=orphan_grace_s)
    if r.refused:
        pytest.skip(f"the loader refused the configuration: {r.refused}")
    report = r.report
    assert report is not None
    if report.outcome == "deadline":
        _deadline_passed(r, deadline_s, must)
    if report.outcome == "raised":
        pytest.fail(f"scenario raised outside the loader's calls:\n{report.error}", pytrace=False)
    if report.outcome == "killed" and not parent_dies:
        how = (
            f"signal {report.killed_by_signal}"
            if report.killed_by_signal is not None
            else f"exit status {report.exit_code}, before the scenario could report"
        )
        pytest.fail(f"the loader's process died ({how})", pytrace=False)
    return r


def shutdown_s(loader_cls: type, r: Run, epoch: int = 0) -> float:
    """How long leaving epoch `epoch` took to shut the workers down. A loader that declares
    `workers_die_with = "loader"` (torchdata's keeps its iterator) shuts down when the loader is
    dropped, so that time counts too."""
    dropped = [e for e in r.of(epoch, "dropped")]
    took = float(dropped[-1]["dt"]) if dropped else 0.0
    if loaders.workers_die_with(loader_cls) == "loader":
        took += sum(float(e["dt"]) for e in r.of(None, "loader_dropped"))
    return took


def kwargs(workers: int, prefetch: int | None = None, **extra: Any) -> dict[str, Any]:
    """Constructor arguments: prefetch_factor only where torch allows it (workers > 0)."""
    out: dict[str, Any] = {"num_workers": workers, **extra}
    if workers > 0 and prefetch is not None:
        out["prefetch_factor"] = prefetch
    return out
