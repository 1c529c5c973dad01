"""Test-side helpers shared by the case files: run a scenario bounded, read its events, grade
leaks. Failures read "expected … ; actual …" (conformance.grading.Grade.fail)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance import _scenarios
from conformance._sandbox import Outcome, run_bounded
from conformance.grading import MUST_BOUND_S, Grade

DEADLINE_S = 30.0  # per scenario: 2 x the 15 s MUST bound; a correct loader needs a few seconds
# A constructor that says it cannot honour one of torch's arguments (e.g. a start method).
_REFUSED = re.compile(r"loader = loader_cls\(.*\n(?:.*\n)*NotImplementedError: (.*)")
_UNSUPPORTED = re.compile(r"TypeError: .*(unexpected keyword argument|got an unexpected) '?(\w+)'?")


@dataclass
class Run:
    """A finished scenario: its outcome, the events it streamed, its return value."""

    outcome: Outcome
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        return self.outcome.value if isinstance(self.outcome.value, dict) else {}

    def of(self, epoch: int = 0, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e.get("epoch") == epoch and (kind is None or e.get("kind") == kind)
        ]

    def batches(self, epoch: int = 0) -> list[list[Any]]:
        return [e["value"] for e in self.of(epoch, "batch")]

    def items(self, epoch: int = 0) -> list[Any]:
        return [x for b in self.batches(epoch) for x in b]

    def last(self, epoch: int = 0) -> str:
        evs = self.of(epoch)
        return evs[-1]["kind"] if evs else "nothing"


def run(
    target: Any, *args: Any, deadline_s: float = DEADLINE_S, must: str = "IterationTerminates"
) -> Run:
    """Run ``target(*args)`` in the sandbox. A scenario that hangs past ``deadline_s`` fails the
    case as a violation of ``must``; one that raises (outside the loader's own errors, which the
    scenario records) is skipped when the loader lacks one of torch's arguments, else fails."""
    outcome = run_bounded(target, *args, deadline_s=deadline_s)
    r = Run(outcome, [n for n in outcome.notes if isinstance(n, dict) and "epoch" in n])
    if outcome.status == "deadline":
        done = ", ".join(f"{e['kind']}" for e in r.events[-5:]) or "nothing"
        # Event times are CLOCK_MONOTONIC in the child, the same clock as here.
        waited = time.monotonic() - r.events[-1]["t"] if r.events else outcome.elapsed_s
        Grade.fail(
            must,
            f"the scenario to end within {deadline_s:g} s",
            f"still running at the deadline (last events: {done}; nothing more for "
            f"{waited:.1f} s); killed",
        )
    if outcome.status == "raised":
        match = _UNSUPPORTED.search(outcome.error or "")
        if match:
            pytest.skip(f"the loader does not accept torch's argument {match.group(2)!r}")
        refused = _REFUSED.search(outcome.error or "")
        if refused:
            pytest.skip(f"the loader's constructor refused: {refused.group(1)}")
        pytest.fail(f"scenario raised outside next():\n{outcome.error}", pytrace=False)
    if outcome.status == "killed":
        how = (
            f"signal {outcome.killed_signal}"
            if outcome.killed_signal is not None
            else f"exit status {outcome.exit_code}, before the scenario could report"
        )
        pytest.fail(f"the loader's process died ({how})", pytrace=False)
    return r


def drive(loader_cls: type, deadline_s: float = DEADLINE_S, **plan: Any) -> Run:
    return run(_scenarios.drive, loader_cls, _scenarios.Plan(**plan), deadline_s=deadline_s)


def check_clean(grade: Grade, r: Run) -> None:
    """Nothing left after the loader was dropped: no process, zombie, thread, fd, /dev/shm entry
    (ShutdownCompletes), and the workers were gone promptly (PromptFaultHandling)."""
    for epoch, alive in r.result.get("alive_after_drop", {}).items():
        if alive:
            Grade.fail(
                "ShutdownCompletes",
                f"the workers gone once the iterator of epoch {epoch} was dropped",
                f"workers {alive} alive {MUST_BOUND_S:g} s later",
            )
    leaks = r.result.get("leaks", "")
    if leaks:
        Grade.fail("ShutdownCompletes", "nothing left after the loader was dropped", leaks)
    if r.outcome.orphans:
        Grade.fail(
            "ShutdownCompletes",
            "no process left in the scenario's session",
            ", ".join(r.outcome.orphans),
        )
    drops = [*r.result.get("drop_s", {}).values(), r.result.get("loader_drop_s", 0.0)]
    slowest = max(drops, default=0.0)
    if slowest > MUST_BOUND_S:
        Grade.fail("ShutdownCompletes", f"shutdown within {MUST_BOUND_S:g} s", f"{slowest:.1f} s")


def shutdown_s(loader_cls: type, r: Run, epoch: int = 0) -> float:
    """How long leaving epoch ``epoch`` took to shut the workers down. A loader that declares
    ``workers_die_with = "loader"`` (torchdata's keeps its iterator) shuts down when the loader is
    dropped, so that time counts too."""
    took = float(r.result["drop_s"][epoch])
    if getattr(loader_cls, "workers_die_with", "iterator") == "loader":
        took += float(r.result.get("loader_drop_s", 0.0))
    return took


def kwargs(workers: int, prefetch: int | None = None, **extra: Any) -> dict[str, Any]:
    """Constructor arguments: prefetch_factor only where torch allows it (workers > 0)."""
    out: dict[str, Any] = {"num_workers": workers, **extra}
    if workers > 0 and prefetch is not None:
        out["prefetch_factor"] = prefetch
    return out
