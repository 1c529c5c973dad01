"""Play a scenario against the loader under test, as a conformance case: `play(loader_cls, ...)`.

A scenario is a `faultinject.driver.Plan` played in faultinject's sandbox. What a case cannot
judge becomes the case's outcome here, once for every case: a loader that cannot express the
configuration is a SKIP with its reason; a scenario still running at its deadline is a FAIL of
the case's MUST property, naming the last events and how long nothing more happened; a scenario
that raised outside the loader's calls, or a loader process that died on its own, fails the case.

What the loader's workers are (`workers`: processes, threads, or none visible) decides whether a
case applies: `needs_worker_processes` SKIPs a case that needs a worker process to kill or to
outlive its parent, with the reason; `hang_s` is how long a hung fetch lasts (for ever in a
process, which shutdown can terminate; `THREAD_HANG_S` in a thread, which nothing can stop).

Leak waits: after a scenario the sandbox gives what the loader left up to `LEAK_WAIT_S` (the MUST
bound) to go away. Once a loader type has left something that long, it has shown it leaks, and
its later scenarios wait `LEAK_WAIT_AFTER_LEAK_S`: a loader that leaks at every shutdown still
gets its report in minutes (each case still FAILs on what is left, naming the shorter wait).
The same for workers left alive after their iterator was dropped: once a loader class's workers
outlived a drop by `MUST_BOUND_S`, its later scenarios wait `LEAK_WAIT_AFTER_LEAK_S` after a
drop (a loader that never reaps its workers fails each such case in seconds, naming the case
that waited in full). And for a loader that hangs at iter(): once `HUNG_CASES` scenarios ran
into their whole deadline with nothing after the loader was built (`past_deadline` counts them,
for every player: plain, resume), its later scenarios get `HUNG_DEADLINE_S` (plus the iterator
start it declares; `hang_deadline`, which the resume and rank players and the worker probe ask
too). One that gets past iter() under that short deadline is slow, not hung: the pattern is
forgotten and the scenario played again in full. `play(..., leaks=False)` waits for
nothing: for the many examples of a Hypothesis case, whose leaks one full-wait replay checks
(`conformance.harness.drawn`).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

import pytest
from loaderspec.conformance.harness.grading import MUST_BOUND_S, fail
from loaderspec.faultinject import driver, loaders
from loaderspec.faultinject.driver import Plan, Run, run
from loaderspec.faultinject.events import (
    AliveAfterDrop,
    Built,
    Dropped,
    Error,
    Len,
    LoaderDropped,
)

from loaderspec.vocabulary import PropertyName

__all__ = [
    "DEADLINE_S",
    "LEAK_WAIT_AFTER_LEAK_S",
    "LEAK_WAIT_S",
    "NO_WORKER_TO_KILL",
    "THREAD_HANG_S",
    "current_case",
    "forget_played",
    "hang_deadline",
    "hang_s",
    "hung_at_start",
    "kwargs",
    "loader_errors",
    "loader_key",
    "needs_worker_processes",
    "past_deadline",
    "play",
    "shutdown_s",
    "workers",
]

DEADLINE_S = 20.0  # per scenario: the 15 s MUST bound and a margin; a correct loader needs a few s
LEAK_WAIT_S = MUST_BOUND_S
LEAK_WAIT_AFTER_LEAK_S = 1.0
# A hung fetch in a thread worker lasts this long: nothing can stop a thread, and one left hanging
# would count as a leak. Shorter than LEAK_WAIT_S, so a correct loader's abandoned thread ends
# (and is joined) before the leak count; a shutdown that waits it out is graded NON-STRICT.
THREAD_HANG_S = 4.0
FOREVER_S = 3600.0

# Loader types (as constructed: the "built" event) that left something behind after LEAK_WAIT_S,
# and the case that showed it.
_LEAKED: dict[str, str] = {}
# Loader classes whose workers outlived a dropped iterator (or whose processes outlived the
# loader's drop) by MUST_BOUND_S, and the case that showed it: their later scenarios wait
# LEAK_WAIT_AFTER_LEAK_S for the workers after a drop.
_ALIVE_AFTER_DROP: dict[str, str] = {}
ALIVE_PATTERN = "the workers already outlived a dropped iterator or loader by"
# Loader classes whose scenario ran into its whole deadline before anything happened after the
# loader was built (iter() or the first next() never returned), and those cases. After
# HUNG_CASES of them, a scenario's deadline is HUNG_DEADLINE_S (plus the iterator start the
# loader declares): a loader that hangs at iter() gets each later verdict in a second or two.
# Only a loader that already broke the MUST bound twice this way gets it (a correct loader's first
# batch comes in well under a second; one that starts under it is played again in full).
_HUNG_AT_START: dict[str, list[str]] = {}
HUNG_CASES = 2
HUNG_DEADLINE_S = 1.0
HUNG_PATTERN = "it already hung before its first batch (at iter())"

# The runs the running case played (the plugin empties it as each case starts), so that a FAIL
# can carry the errors the loader raised in them (`loader_errors`).
_PLAYED: list[Run] = []

_KINDS = {"threads": "thread workers", "none": "a loader with no visible workers"}
# Why a case that kills a worker does not apply to thread workers.
NO_WORKER_TO_KILL = "a worker thread cannot be killed without killing the loader's process"


def workers(loader_cls: type) -> loaders.WorkerKind:
    """What the loader's workers are (`faultinject.driver.workers`: declared, else observed;
    a loader that hung at iter() is watched no longer than its later scenarios)."""
    return driver.workers(loader_cls, hang_deadline(loader_cls, driver.PROBE_DEADLINE_S))


def needs_worker_processes(loader_cls: type, why: str) -> None:
    """SKIP the running case unless the loader's workers are processes: "not applicable to
    thread workers: `why`"."""
    kind = workers(loader_cls)
    if kind != "processes":
        pytest.skip(f"not applicable to {_KINDS[kind]}: {why}")


def hang_s(loader_cls: type) -> float:
    """How long a `Hang` lasts in this loader's workers (see the module docstring)."""
    return FOREVER_S if workers(loader_cls) == "processes" else THREAD_HANG_S


def _left_something(r: Run) -> bool:
    report = r.report
    return report is not None and bool(
        report.lingering or report.zombies or report.leaked_threads or report.leaked_fds
    )


def loader_key(loader_cls: type) -> str:
    """The key under which what a loader class has shown is kept (a local class's too)."""
    return f"{loader_cls.__module__}:{loader_cls.__qualname__}"


def hung_at_start(loader_cls: type) -> list[str]:
    """The cases in which `loader_cls` hung before its first batch, once they are `HUNG_CASES`
    or more (then its later scenarios get short deadlines); [] before."""
    hung = _HUNG_AT_START.get(loader_key(loader_cls), [])
    return list(hung) if len(hung) >= HUNG_CASES else []


def hang_deadline(loader_cls: type, deadline_s: float) -> float:
    """The deadline a scenario of `loader_cls` gets: `deadline_s`, or `HUNG_DEADLINE_S` (plus
    the iterator start the loader declares) once it hung before its first batch in `HUNG_CASES`
    cases (`past_deadline` counts them). Every player (a plain run, a resume, the ranks, the
    worker probe) asks here: one pattern, however the case plays."""
    if hung_at_start(loader_cls):
        return min(deadline_s, HUNG_DEADLINE_S + loaders.iterator_start_s(loader_cls))
    return deadline_s


def past_deadline(
    loader_cls: type, started: bool, deadline_s: float, full_deadline_s: float
) -> str | None:
    """Count a scenario of the running case that ran into its deadline: one that had its whole
    deadline (`full_deadline_s`) and never got past building the loader and calling iter()
    (`started`: anything after) is a hang at iter(). The note its FAIL adds: the pattern and
    the cases that showed it, when the deadline was the short one and it hung at iter() again
    ("" for the whole deadline). None: it started under the short deadline, so the loader does
    not hang at iter() after all: the pattern is forgotten, and the caller plays the scenario
    again with its whole deadline (a slow loader is never failed by the short one)."""
    key = loader_key(loader_cls)
    hung = _HUNG_AT_START.setdefault(key, [])
    if deadline_s < full_deadline_s and started:
        del _HUNG_AT_START[key]
        return None
    if not started and deadline_s >= full_deadline_s and _current_case() not in hung:
        hung.append(_current_case())
    if deadline_s < full_deadline_s:
        return f" ({HUNG_PATTERN} in {' and '.join(hung)}: a deadline of {deadline_s:g} s)"
    return ""


def current_case() -> str:
    """The running case's node id (for a FAIL that names where a pattern was first seen)."""
    return _current_case()


def forget_played() -> None:
    """Start a case: the runs played so far were another case's."""
    _PLAYED.clear()


def loader_errors(limit: int = 2) -> list[str]:
    """The first `limit` distinct errors the loader raised in the runs the running case played
    (each "Type: message", its first line), for a FAIL whose check did not name them."""
    found: list[str] = []
    for r in _PLAYED:
        for e in r.of(None, Error):
            text = (e.text or e.type).strip().splitlines()
            if text and text[0] not in found:
                found.append(text[0])
    return found[:limit]


def _started(r: Run) -> bool:
    """Whether the scenario got past building the loader and starting its first epoch."""
    return any(not isinstance(e, (Built, Len)) for e in r.events)


def _deadline_passed(r: Run, deadline_s: float, must: PropertyName, note: str = "") -> None:
    done = ", ".join(e.name for e in r.events[-5:]) or "nothing"
    assert r.report is not None
    # Event times are CLOCK_MONOTONIC in the child, the same clock as here.
    waited = time.monotonic() - r.events[-1].t if r.events else r.report.elapsed_s
    fail(
        must,
        f"the scenario to end within {deadline_s:g} s",
        f"still running at the deadline (last events: {done}; nothing more for "
        f"{waited:.1f} s); killed{note}",
    )


def play(
    loader_cls: type,
    plan: Plan | None = None,
    *,
    deadline_s: float = DEADLINE_S,
    must: PropertyName = PropertyName.ITERATION_TERMINATES,
    parent_dies: bool = False,
    orphan_grace_s: float = 1.0,
    leaks: bool = True,
    skip_refused: bool = True,
    **fields: Any,
) -> Run:
    """Play `plan` (or `Plan(**fields)`) against `loader_cls` in a sandbox and return the `Run`.

    Skips the case when the loader refuses the configuration (`faultinject.loaders`); fails it
    as a violation of `must` when the scenario outlives `deadline_s`; fails it when the scenario
    raised outside the loader's calls, or when the loader's process died (unless the plan kills
    it: `parent_dies`). `leaks=False`: give nothing time to go away after the scenario (its
    leaks are not to be graded). `skip_refused=False`: a refused configuration returns the
    `Run` (its `refused` says why) instead of skipping the case.
    """
    plan = Plan(**fields) if plan is None else plan
    ref = loader_key(loader_cls)
    if ref in _ALIVE_AFTER_DROP:
        plan = replace(plan, drop_wait_s=LEAK_WAIT_AFTER_LEAK_S)
    full_deadline_s, deadline_s = deadline_s, hang_deadline(loader_cls, deadline_s)
    r = run(
        loader_cls,
        plan,
        deadline_s=deadline_s,
        orphan_grace_s=orphan_grace_s,
        linger_s=LEAK_WAIT_S if leaks else 0.0,
        # Workers that outlived a dropped iterator outlive the loader's drop too: one cause.
        linger_by_type=dict.fromkeys([*_LEAKED, *_ALIVE_AFTER_DROP], LEAK_WAIT_AFTER_LEAK_S)
        if leaks
        else None,
    )
    built = r.first(Built, epoch=None)
    if leaks and built is not None:
        if built.linger_s is not None:
            why = _LEAKED.get(built.ref) or (
                f"{ALIVE_PATTERN} {MUST_BOUND_S:g} s in {_ALIVE_AFTER_DROP.get(built.ref)}"
            )
            r.leak_note = f"waited {built.linger_s:g} s: {why}"
        elif _left_something(r):
            _LEAKED[built.ref] = f"it already left the same after {LEAK_WAIT_S:g} s in "
            _LEAKED[built.ref] += _current_case()
            if r.report is not None and r.report.lingering:  # its processes: one cause
                _ALIVE_AFTER_DROP.setdefault(ref, _current_case())
    _PLAYED.append(r)
    left_alive = [e for e in r.of(None, AliveAfterDrop) if e.pids]
    if left_alive and ref not in _ALIVE_AFTER_DROP and plan.drop_wait_s >= MUST_BOUND_S:
        _ALIVE_AFTER_DROP[ref] = _current_case()
    if left_alive and plan.drop_wait_s < MUST_BOUND_S:
        r.leak_note = (
            f"waited {plan.drop_wait_s:g} s: {ALIVE_PATTERN} {MUST_BOUND_S:g} s in "
            f"{_ALIVE_AFTER_DROP[ref]}"
        )
    if r.refused:
        if not skip_refused:
            return r
        pytest.skip(f"the loader refused the configuration: {r.refused}")
    report = r.report
    assert report is not None
    if report.outcome == "deadline":
        note = past_deadline(loader_cls, _started(r), deadline_s, full_deadline_s)
        if note is None:  # it started under the short deadline: slow, not hung; all of it
            again: dict[str, Any] = {"parent_dies": parent_dies, "orphan_grace_s": orphan_grace_s}
            again |= {"leaks": leaks, "skip_refused": skip_refused, "must": must}
            return play(loader_cls, plan, deadline_s=full_deadline_s, **again)
        _deadline_passed(r, deadline_s, must, note)
    if report.outcome == "raised":
        error = str(report.error or "").strip()
        last = error.splitlines()[-1] if error else "?"  # the exception, before its traceback
        fail(must, "the scenario to run", f"it raised outside the loader's calls: {last}\n{error}")
    if report.outcome == "killed" and not parent_dies:
        how = (
            f"signal {report.killed_by_signal}"
            if report.killed_by_signal is not None
            else f"exit status {report.exit_code}, before the scenario could report"
        )
        fail(must, "the loader's process to live", f"it died ({how})")
    return r


def _current_case() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "an earlier case").rsplit(" ", 1)[0]


def shutdown_s(loader_cls: type, r: Run, epoch: int = 0) -> float:
    """How long leaving epoch `epoch` took to shut the workers down. A loader that declares
    `workers_die_with = "loader"` (torchdata's keeps its iterator) shuts down when the loader is
    dropped, so that time counts too."""
    dropped = r.of(epoch, Dropped)
    took = dropped[-1].dt if dropped else 0.0
    if loaders.workers_die_with(loader_cls) == "loader":
        took += sum(e.dt for e in r.of(None, LoaderDropped))
    return took


def kwargs(workers: int, prefetch: int | None = None, **extra: Any) -> dict[str, Any]:
    """Constructor arguments: prefetch_factor only where torch allows it (workers > 0)."""
    out: dict[str, Any] = {"num_workers": workers, **extra}
    if workers > 0 and prefetch is not None:
        out["prefetch_factor"] = prefetch
    return out
