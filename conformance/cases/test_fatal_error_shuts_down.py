"""FatalErrorShutsDown (SHOULD): once next() has raised a fatal error (a worker's death, a timeout),
the iterator has started its shutdown: its workers do not live on until the iterator is dropped.
Seen from outside: with the iterator still held, the loader's worker processes are gone within
HOLD_S of the error."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    NO_WORKER_TO_KILL,
    Die,
    Grade,
    Hang,
    Run,
    checks,
    hang_s,
    kwargs,
    needs_worker_processes,
    play,
    spec_property,
)
from loaderspec.faultinject.events import AliveAfterError, Error

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.FATAL_ERROR_SHUTS_DOWN
# How long the user holds the failed iterator while the workers must go: torch's 5 s join of a
# worker that does not exit (then terminate()), and a margin.
HOLD_S = 6.0
WHY = "a worker thread cannot be seen to exit while the loader's process lives"


def _workers_gone(grade: Grade, r: Run, what: str) -> None:
    held = r.first(AliveAfterError)
    if held is None:  # no error ended the epoch: the case's other property graded that
        return
    if held.pids:
        grade.non_strict(
            PROP,
            None,
            f"workers {list(held.pids)} still alive {HOLD_S:g} s after the {what} was raised,"
            " the iterator held",
        )
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP, PropertyName.ITERATION_TERMINATES)
def test_workers_go_after_a_timeout_error(loader_cls: type, grade: Grade) -> None:
    """timeout=1 and a worker hung in item 2: next() raises "timed out"; with the iterator still
    held, every worker process (the hung one too) is gone within 6 s.

    Property: FatalErrorShutsDown. Seed (spec, MainTimeout): "`timeout` expired: raise,
    fail-stop" - the iterator shuts down, as after a worker's death (docs/architecture.md).
    Guards: B4 pytorch/pytorch#21554 ("with timeout>0 the loader raises but leaves the stuck
    workers alive").
    """
    needs_worker_processes(loader_cls, WHY)
    r = play(
        loader_cls,
        n=8,
        faults=(Hang(2, hang_s(loader_cls)),),
        hold_after_error_s=HOLD_S,
        kwargs=kwargs(2, 2, batch_size=1, timeout=1),
    )
    error = r.first(Error)
    if error is None or "timed out" not in error.text:
        grade.fail(
            PropertyName.ITERATION_TERMINATES,
            "a 'timed out' error",
            f"{[e.name for e in r.calls()]}",
        )
        return
    _workers_gone(grade, r, "timeout error")


@spec_property(PROP, PropertyName.WORKER_DEATH_RAISES)
def test_workers_go_after_a_worker_death_error(loader_cls: type, grade: Grade) -> None:
    """A worker dies (SIGKILL in item 5): next() raises the death; with the iterator still held,
    the other worker process is gone within 6 s.

    Property: FatalErrorShutsDown. Seed (dataloader.py, _try_get_data): "raise
    RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly')"; the spec's
    fail-stop: the iterator then shuts down (pin thread first, then workers).
    Guards: B1 pytorch/pytorch#16608 (a loader left with workers in an unknown state after a
    worker death), B4 pytorch/pytorch#21554 (the failed iterator's workers left alive).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        faults=(Die(5),),
        hold_after_error_s=HOLD_S,
        kwargs=kwargs(2, 2, batch_size=1),
    )
    # Any error will do here: what it says is test_worker_death_raises's to grade.
    if not r.of(0, Error):
        batches = len(r.batches())
        grade.fail(
            PropertyName.WORKER_DEATH_RAISES,
            "an error for the dead worker",
            f"{batches} batches, none",
        )
        return
    _workers_gone(grade, r, "death")
