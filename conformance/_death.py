"""Grading shared by the worker-death cases (WorkerDeathRaises, FailStopAfterFatalError,
NoSilentLoss): one reading of the events, three properties."""

from __future__ import annotations

import re

from conformance._cases import Run
from conformance.grading import MUST_BOUND_S, PROMPT, SHOULD_BOUND_S, Grade

# torch: "DataLoader worker (pid 42) is killed by signal"; paddle: "DataLoader process (pid 42)
# exited is killed by signal". Either tells the user which process died.
_NAMES_THE_WORKER = re.compile(r"worker|\bpids?\b\W*\d+", re.IGNORECASE)


def first_error_reported(grade: Grade, r: Run) -> None:
    """WorkerDeathRaises: the epoch did not end (or go on forever) without an error, and the
    error came within the bounds."""
    errors = r.of(0, "error")
    if not errors:
        grade.fail(
            "WorkerDeathRaises",
            "an error naming the dead worker",
            f"no error; {len(r.of(0, 'batch'))} batches then {r.last()}",
        )
    grade.bounded("WorkerDeathRaises", "death_reported_s", errors[0]["dt"], "worker death raised")
    if not _NAMES_THE_WORKER.search(str(errors[0]["value"])):
        grade.fail(
            "WorkerDeathRaises",
            "an error that names the dead worker (the word 'worker' or its pid)",
            errors[0]["value"],
        )


def _after_first_error(r: Run) -> list[dict] | None:
    """The next() results after the first error (None: there was no error)."""
    events = r.of(0)
    first = next((i for i, e in enumerate(events) if e["kind"] == "error"), None)
    if first is None:
        return None
    return [e for e in events[first + 1 :] if e["kind"] in ("batch", "error", "stop")]


def slowest_later_next(r: Run) -> float:
    """The longest next() after the first error (0 when there was none)."""
    return max((e["dt"] for e in _after_first_error(r) or []), default=0.0)


def later_calls_fail_stop(grade: Grade, r: Run) -> None:
    """FailStopAfterFatalError (SHOULD) and IterationTerminates (MUST) for the calls after the
    first error."""
    after = _after_first_error(r)
    if after is None:
        return
    batches = [e for e in after if e["kind"] == "batch"]
    slowest = slowest_later_next(r)
    grade.figure("slowest_later_next_s", slowest)
    if slowest > MUST_BOUND_S:
        grade.fail(
            "IterationTerminates", f"later next() within {MUST_BOUND_S:g} s", f"{slowest:.1f} s"
        )
    if batches:
        grade.non_strict(
            "FailStopAfterFatalError",
            None,
            f"{len(batches)} batches handed out after the worker-death error",
        )
    if slowest > SHOULD_BOUND_S:
        grade.non_strict(
            PROMPT, None, f"a later next() took {slowest:.2f} s (SHOULD: {SHOULD_BOUND_S:g} s)"
        )


def no_silent_loss(grade: Grade, r: Run, tasks: set[int]) -> None:
    """NoSilentLoss: StopIteration only when every task was handed out."""
    if r.last() not in ("stop", "dropped") or not r.of(0, "stop"):
        return
    delivered = set(r.items())
    missing = sorted(tasks - delivered)
    if missing and r.of(0, "error"):
        grade.fail(
            "NoSilentLoss",
            "no StopIteration while a task was never handed out",
            f"StopIteration with items {missing[:10]} never handed out",
        )
    elif missing:
        grade.fail(
            "NoSilentLoss",
            "an error or every item",
            f"StopIteration without an error, items {missing[:10]} missing",
        )
