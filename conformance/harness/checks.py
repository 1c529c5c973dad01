"""The suite's property checks: one reading of a played scenario per spec property.

Each check reads a `faultinject.driver.Run` of any plan (the events the user saw, the sandbox's
report of what was left) and grades one property into a `Grade`: a MUST violation through
`grade.fail`, a SHOULD one through `grade.non_strict`, measured figures through `grade.figure`. The
cases call them, and so does `loaderspec.scenarios` for the spec-generated scenarios (with a
collecting `Grade`): one oracle for both. A check returns after a failure, so a collecting grade
can go on.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from loaderspec.conformance.harness.grading import MUST_BOUND_S, PROMPT, SHOULD_BOUND_S, Grade
from loaderspec.faultinject.driver import Run
from loaderspec.faultinject.events import (
    AliveAfterDrop,
    Batch,
    Call,
    Dropped,
    Error,
    LoaderDropped,
    Paused,
    Stop,
    WorkersLeft,
)

from loaderspec.vocabulary import TORCH_PREFETCH_FACTOR, PropertyName

__all__ = [
    "death_reported",
    "each_once",
    "ended",
    "in_order",
    "later_calls_fail_stop",
    "leaks",
    "no_silent_loss",
    "nothing_left",
    "orphans_exit",
    "prefetch_bound",
    "prefetch_window",
    "raised",
    "slowest_later_next",
]

# torch: "DataLoader worker (pid 42) is killed by signal"; paddle: "DataLoader process (pid 42)
# exited is killed by signal". Either tells the user which process died.
_NAMES_THE_WORKER = re.compile(r"worker|\bpids?\b\W*\d+", re.IGNORECASE)


def ended(grade: Grade, r: Run, must: PropertyName = PropertyName.ITERATION_TERMINATES) -> None:
    """The scenario ended within its deadline (a hang is a violation of `must`) and did not
    raise outside the loader's calls."""
    report = r.report
    if report is None:
        return
    if report.outcome == "deadline":
        grade.fail(must, "the scenario to end within its deadline", f"killed: {report.error}")
    elif report.outcome == "raised":
        grade.fail(must, "the scenario to end", f"it raised: {report.error}")


def leaks(r: Run) -> str:
    """What the scenario left after the loader was dropped, in one line ("" when nothing):
    processes (alive, or left in the session after it ended), zombies, threads, fds, /dev/shm."""
    report = r.report
    if report is None:
        return ""
    left = [p for p in report.leftover_pids if p not in report.helpers]
    found: dict[str, list[Any]] = {
        "processes": report.lingering,
        "session": left,
        "zombies": report.zombies,
        "threads": report.leaked_threads,
        "fds": report.leaked_fds,
        "shm": report.leaked_shm,
    }
    parts = [
        f"{name}: {', '.join(map(str, items[:5]))}{' …' if len(items) > 5 else ''}"
        for name, items in found.items()
        if items
    ]
    return "; ".join(parts) + named(r, [*report.lingering, *left, *report.zombies])


def named(r: Run, pids: list[int]) -> str:
    """What the first few of `pids` were (the sandbox's `name`: command line, parent, start,
    which worker or none), so that a leak can be told from a stray process ("" for none)."""
    if r.report is None or not pids:
        return ""
    shown = list(dict.fromkeys(pids))[:3]
    return " [" + " | ".join(r.report.name(pid) for pid in shown) + "]"


def nothing_left(grade: Grade, r: Run) -> None:
    """ShutdownCompletes, for a scenario of any kind: nothing left after the loader was dropped
    (no process, zombie, thread, fd or /dev/shm entry; no worker alive 15 s after the iterator
    that owned it, or on a rank the loader, was dropped; nothing listening on a rank group's
    port), and no shutdown took longer than the MUST bound."""
    for e in r.of(None):
        if isinstance(e, AliveAfterDrop | WorkersLeft) and e.pids:
            owner = (
                f"the iterator of epoch {e.epoch}"
                if isinstance(e, AliveAfterDrop)
                else f"rank {e.rank}'s loader"
            )
            grade.fail(
                PropertyName.SHUTDOWN_COMPLETES,
                f"the workers gone once {owner} was dropped",
                f"workers {list(e.pids)} alive {min(e.dt, MUST_BOUND_S):.0f} s later"
                f"{named(r, list(e.pids))}" + (f" ({r.leak_note})" if r.leak_note else ""),
            )
            return
    left = leaks(r)
    if r.port_listening:
        left = "; ".join(filter(None, [left, f"port {r.port} still listening"]))
    if left:
        note = f" ({r.leak_note})" if r.leak_note else ""
        grade.fail(
            PropertyName.SHUTDOWN_COMPLETES,
            "nothing left after the loader was dropped",
            left + note,
        )
        return
    drops = [e.dt for e in r.of(None) if isinstance(e, Dropped | LoaderDropped)]
    slowest = max(drops, default=0.0)
    if slowest > MUST_BOUND_S:
        grade.fail(
            PropertyName.SHUTDOWN_COMPLETES,
            f"shutdown within {MUST_BOUND_S:g} s",
            f"{slowest:.1f} s",
        )


def orphans_exit(grade: Grade, r: Run, what: str) -> None:
    """NoOrphanWorkers (MUST, within 15 s) and PromptFaultHandling (SHOULD, 0.5 s): after the
    loader's process was SIGKILLed, every worker exited on its own."""
    exits = {} if r.report is None else r.report.orphan_exit_s
    alive = [pid for pid, t in exits.items() if t is None]
    if alive:
        grade.fail(
            PropertyName.NO_ORPHAN_WORKERS,
            f"every worker gone within {MUST_BOUND_S:g} s of the parent's SIGKILL",
            f"workers {alive} still alive ({what}); killed by the harness{named(r, alive)}",
        )
        return
    slowest = max((t for t in exits.values() if t is not None), default=0.0)
    grade.bounded(
        PropertyName.NO_ORPHAN_WORKERS,
        "orphan_exit_s",
        slowest,
        f"{what} exiting after parent death",
    )


def death_reported(grade: Grade, r: Run, epoch: int = 0, ignore: Collection[str] = ()) -> None:
    """WorkerDeathRaises: the epoch did not end (or go on forever) without an error, the error
    came within the bounds, and it names the dead worker. `ignore`: types of errors the scenario
    injected on purpose (not the death's)."""
    errors = [e for e in r.of(epoch, Error) if e.type not in ignore]
    if not errors:
        grade.fail(
            PropertyName.WORKER_DEATH_RAISES,
            "an error whose message names the dead worker (the word 'worker' or 'pid <number>')",
            f"no error; {len(r.of(epoch, Batch))} batches then {r.last(epoch)}",
        )
        return
    grade.bounded(
        PropertyName.WORKER_DEATH_RAISES, "death_reported_s", errors[0].dt, "worker death raised"
    )
    if not _NAMES_THE_WORKER.search(errors[0].text):
        grade.fail(
            PropertyName.WORKER_DEATH_RAISES,
            "an error whose message names the dead worker: it must contain the word 'worker' "
            "or 'pid <number>' (torch: 'DataLoader worker (pid 42) is killed by signal')",
            errors[0].text,
        )


def raised(grade: Grade, call: Call | None, exc_type: str, text: str, prop: PropertyName) -> None:
    """`prop`: the `next()` result `call` is an error of type `exc_type` (the type the user
    catches, as recorded, not read off the message: "RuntimeError: Caught ValueError ..." is a
    RuntimeError) whose message contains `text`."""
    if not isinstance(call, Error):
        grade.fail(prop, f"{exc_type} carrying {text!r}", f"{call and call.name}")
        return
    if call.type != exc_type or text not in call.text:
        grade.fail(prop, f"{exc_type} carrying {text!r}", call.text[:300])


def _after_first_error(r: Run) -> list[Call] | None:
    """The next() results after the first error (None: there was no error)."""
    calls = r.calls()
    first = next((i for i, e in enumerate(calls) if isinstance(e, Error)), None)
    if first is None:
        return None
    return calls[first + 1 :]


def slowest_later_next(r: Run) -> float:
    """The longest next() after the first error (0 when there was none)."""
    return max((e.dt for e in _after_first_error(r) or []), default=0.0)


def later_calls_fail_stop(grade: Grade, r: Run) -> None:
    """FailStopAfterFatalError (SHOULD) and IterationTerminates (MUST) for the calls after the
    first error."""
    after = _after_first_error(r)
    if after is None:
        return
    batches = [e for e in after if isinstance(e, Batch)]
    slowest = slowest_later_next(r)
    grade.figure("slowest_later_next_s", slowest)
    if slowest > MUST_BOUND_S:
        grade.fail(
            PropertyName.ITERATION_TERMINATES,
            f"later next() within {MUST_BOUND_S:g} s",
            f"{slowest:.1f} s",
        )
        return
    if batches:
        grade.non_strict(
            PropertyName.FAIL_STOP_AFTER_FATAL_ERROR,
            None,
            f"{len(batches)} batches handed out after the worker-death error",
        )
    if slowest > SHOULD_BOUND_S:
        grade.non_strict(
            PROMPT, None, f"a later next() took {slowest:.2f} s (SHOULD: {SHOULD_BOUND_S:g} s)"
        )


def no_silent_loss(grade: Grade, r: Run, tasks: Collection[Any], epoch: int = 0) -> None:
    """NoSilentLoss: StopIteration only when every task was handed out."""
    if not r.of(epoch, Stop):
        return
    missing = sorted(set(tasks) - set(r.items(epoch)))
    if missing and r.of(epoch, Error):
        grade.fail(
            PropertyName.NO_SILENT_LOSS,
            "no StopIteration while a task was never handed out",
            f"StopIteration with items {missing[:10]} never handed out",
        )
    elif missing:
        grade.fail(
            PropertyName.NO_SILENT_LOSS,
            "an error or every item",
            f"StopIteration without an error, items {missing[:10]} missing",
        )


def each_once(grade: Grade, r: Run, expected: Collection[Any], epoch: int = 0) -> None:
    """ExactlyOnce and NoDuplicateDelivery for an epoch that ended in StopIteration: every
    expected item handed out, none twice."""
    got = r.items(epoch)
    dups = sorted({x for x in got if got.count(x) > 1})
    if dups:
        grade.fail(
            PropertyName.NO_DUPLICATE_DELIVERY,
            "each item once",
            f"epoch {epoch}: duplicated {dups}",
        )
        return
    if r.of(epoch, Stop) and sorted(got) != sorted(expected):
        grade.fail(PropertyName.EXACTLY_ONCE, f"epoch {epoch}: {sorted(expected)}", f"{got}")


def in_order(grade: Grade, r: Run, epoch: int = 0) -> None:
    """InOrderDelivery for a map-style epoch over a sequential sampler: items ascending."""
    got = r.items(epoch)
    if got != sorted(got):
        grade.fail(PropertyName.IN_ORDER_DELIVERY, f"epoch {epoch} in sampler order", f"{got}")


def prefetch_window(kwargs: Mapping[str, Any]) -> int:
    """The spec's reorder window for these loader arguments: `prefetch_factor * num_workers`
    (torch's default factor where none is given; no workers, no window)."""
    factor = kwargs.get("prefetch_factor") or TORCH_PREFETCH_FACTOR
    return int(factor) * int(kwargs.get("num_workers", 0))


def prefetch_bound(grade: Grade, r: Run, steps: int) -> None:
    """PrefetchBound: at each of the `steps` pauses (`Plan.pause_s`), at most the window's
    worth of items were fetched beyond those consumed."""
    window = prefetch_window(r.plan.kwargs)
    paused = r.of(0, Paused)
    for step in paused:
        bound = step.consumed + window
        if step.fetched > bound:
            grade.fail(
                PropertyName.PREFETCH_BOUND,
                f"at most {bound} items fetched after {step.consumed} were consumed",
                f"{step.fetched} fetched",
            )
    if len(paused) != steps:
        grade.fail(
            PropertyName.PREFETCH_BOUND,
            f"{steps} batches consumed",
            f"{[e.name for e in r.calls()]}",
        )
