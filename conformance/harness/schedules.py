"""Fault schedules drawn, not only hand-picked: one fault at a drawn point of a drawn epoch, and
every MUST property the run can show checked on it.

A `DrawnFault` is a small map-style epoch (6-12 items, batch size 1-2, 1-3 workers, prefetch 1-3,
in order or not) with one fault: a worker killed at fetch k, in collate, while idle after item k
or while blocked writing item k; a persistent worker killed while the workers sit idle between
two epochs; a fetch that hangs (with `timeout=1`); a fetch that raises; or
the loader's process SIGKILLed after k batches. `schedules(kind)` draws them for a loader whose
workers are `kind` (no kills for thread workers: nothing can kill a thread). `str(schedule)` is
the `faultinject.driver.Plan` to replay it with `faultinject.driver.run(loader, plan, ...)`.

`judge(grade, schedule, r)` checks, whatever the fault: the run ended within its deadline (the
harness's `play`); NoDuplicateDelivery; InOrderDelivery (in order: items ascending);
NoSilentLoss; and what the fault calls for: WorkerDeathRaises for a kill in a fetch, in collate
or while writing (the task it held is lost), IterationTerminates's timeout error for a hang, the
error in its turn and every other batch for a raise (ExactlyOnce), NoOrphanWorkers for the
parent's death; for the kill between epochs, a whole first epoch and a second that raises (in
the bounds) or is whole too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st
from loaderspec.conformance.harness import checks
from loaderspec.conformance.harness.grading import Grade
from loaderspec.faultinject.driver import Leave, Plan, Run
from loaderspec.faultinject.events import Error, Stop
from loaderspec.faultinject.faults import Die, Fault, Hang, Raise
from loaderspec.faultinject.loaders import WorkerKind

from loaderspec.vocabulary import PropertyName

__all__ = ["DEADLINE_S", "FAULTS", "DrawnFault", "judge", "picks", "schedules"]

FaultKind = Literal[
    "die_fetch",
    "die_collate",
    "die_idle",
    "die_blocked",
    "die_between",
    "hang",
    "raise",
    "parent_kill",
]
FAULTS: tuple[FaultKind, ...] = (
    "die_fetch",
    "die_collate",
    "die_idle",
    "die_blocked",
    "hang",
    "raise",
    "parent_kill",
    "die_between",
)
# Drawn at random: every fault but the kill between epochs, which every run plays as a pick
# (`picks`), so that adding it changed none of the derandomized draws.
_DRAWN = tuple(f for f in FAULTS if f != "die_between")
_KILLS = {"die_fetch", "die_collate", "die_idle", "die_blocked", "die_between"}
_HANG_S = 4.0  # a hung fetch ends (a thread cannot be stopped); timeout=1 fires well before
DEADLINE_S = 20.0  # per schedule: the 15 s MUST bound and a margin


@dataclass(frozen=True)
class DrawnFault:
    """One drawn run: the epoch and its one fault (see the module docstring)."""

    fault: FaultKind
    at: int  # the item (or, for parent_kill, the batches taken before the kill)
    n: int = 8
    batch_size: int = 1
    workers: int = 2
    prefetch: int = 2
    in_order: bool = True

    def faults(self) -> tuple[Fault, ...]:
        if self.fault == "die_fetch":
            return (Die(self.at),)
        if self.fault == "die_collate":
            return (Die(self.at, point="in_collate"),)
        if self.fault == "die_idle":
            return (Die(self.at, point="idle", blocked_wait_s=2.0),)
        if self.fault == "die_blocked":
            return (Die(self.at, point="blocked_put", blocked_wait_s=2.0),)
        if self.fault == "hang":
            return (Hang(self.at, _HANG_S),)
        if self.fault == "raise":
            return (Raise(self.at, ValueError, f"drawn-{self.at}"),)
        return ()

    def plan(self) -> Plan:
        kwargs: dict[str, Any] = {
            "num_workers": self.workers,
            "prefetch_factor": self.prefetch,
            "batch_size": self.batch_size,
            "in_order": self.in_order,
        }
        leave = {}
        if self.fault == "hang":
            kwargs["timeout"] = 1
        if self.fault == "parent_kill":
            leave = {0: Leave("kill_parent", self.at)}
        between = self.fault == "die_between"
        if between:
            kwargs["persistent_workers"] = True
        return Plan(
            n=self.n,
            faults=self.faults(),
            kwargs=kwargs,
            leave=leave,
            epochs=2 if between else 1,
            kill_worker_before_epoch=1 if between else None,
            max_errors=1 if self.fault == "raise" else 3,
            stop_at_fatal=self.fault != "raise",
            records=True,
        )

    def __str__(self) -> str:
        return f"{self.plan()!r}"


@st.composite
def _schedule(draw: st.DrawFn, kinds: tuple[FaultKind, ...]) -> DrawnFault:
    fault = draw(st.sampled_from(kinds))
    n = draw(st.integers(6, 12))
    # Blocked writes need single-item batches (an oversized item is not collated with others).
    batch_size = 1 if fault == "die_blocked" else draw(st.integers(1, 2))
    last = n // batch_size if fault == "parent_kill" else n - 1
    return DrawnFault(
        fault=fault,
        at=draw(st.integers(0, last)),
        n=n,
        batch_size=batch_size,
        workers=draw(st.integers(1, 3)),
        prefetch=draw(st.integers(1, 3)),
        in_order=draw(st.booleans()),
    )


def schedules(kind: WorkerKind) -> st.SearchStrategy[DrawnFault]:
    """Schedules for a loader whose workers are `kind`: no kills unless they are processes."""
    kinds = _DRAWN if kind == "processes" else tuple(f for f in _DRAWN if f not in _KILLS)
    return _schedule(kinds)


def picks(kind: WorkerKind) -> tuple[DrawnFault, ...]:
    """The schedules played before the drawn ones: a kill between two persistent epochs, for
    worker processes."""
    return (DrawnFault("die_between", at=0, n=8, workers=2),) if kind == "processes" else ()


def _task_lost(schedule: DrawnFault, r: Run) -> bool:
    """The fault killed a worker that held a task: in a fetch or collate, or while it was
    blocked writing a result (its record says whether it was)."""
    fired = {f.fault for f in r.fetches if f.event == "fault"}
    if schedule.fault == "die_blocked":
        return "Die:blocked_put" in fired
    return schedule.fault in ("die_fetch", "die_collate") and bool(fired)


def _judge_between(grade: Grade, schedule: DrawnFault, r: Run, replay: str) -> None:
    """A worker killed between two persistent epochs: the first whole, the second raises within
    the bounds (WorkerDeathRaises) or is whole too (a loader that restarts its workers)."""
    everything = list(range(schedule.n))
    for epoch in (0, 1):
        errors = r.of(epoch, Error)
        if epoch == 1 and errors:
            grade.bounded(
                PropertyName.WORKER_DEATH_RAISES,
                "death_reported_s",
                errors[0].dt,
                f"idle death{replay}",
            )
            return
        if errors or not r.of(epoch, Stop) or sorted(r.items(epoch)) != everything:
            grade.fail(
                PropertyName.EXACTLY_ONCE if epoch == 0 else PropertyName.WORKER_DEATH_RAISES,
                f"epoch {epoch}: items {everything} then StopIteration"
                + (" (or an error for the worker killed before it)" if epoch else ""),
                f"{r.items(epoch)} then {r.last(epoch)}{replay}",
            )
            return


def judge(grade: Grade, schedule: DrawnFault, r: Run) -> None:
    """Grade run `r` of `schedule` (see the module docstring)."""
    replay = f"; replay: {schedule}"
    # Item `at` of a blocked-write schedule is handed out as its oversized bytes.
    items = [schedule.at if isinstance(x, str) else x for x in r.items()]
    dups = sorted({x for x in items if items.count(x) > 1})
    if dups:
        grade.fail(
            PropertyName.NO_DUPLICATE_DELIVERY, "each item once", f"duplicated {dups}{replay}"
        )
        return
    if schedule.in_order and items != sorted(items):
        grade.fail(PropertyName.IN_ORDER_DELIVERY, "items in sampler order", f"{items}{replay}")
        return
    if schedule.fault == "parent_kill":
        checks.orphans_exit(grade, r, f"workers after {schedule.at} batches")
        return
    if schedule.fault == "die_between":
        _judge_between(grade, schedule, r, replay)
        return
    everything = set(range(schedule.n))
    if r.of(0, Stop):
        missing = sorted(everything - set(items))
        lost = set(missing)
        if schedule.fault == "raise":
            k, bs = schedule.at, schedule.batch_size
            lost -= set(range(k - k % bs, k - k % bs + bs))
        if lost:
            grade.fail(
                PropertyName.NO_SILENT_LOSS
                if schedule.fault != "raise"
                else PropertyName.EXACTLY_ONCE,
                "every item not lost to the fault, then StopIteration",
                f"StopIteration with items {sorted(lost)} never handed out{replay}",
            )
            return
    errors = r.of(0, Error)
    if _task_lost(schedule, r):
        if not errors:
            grade.fail(
                PropertyName.WORKER_DEATH_RAISES,
                "an error for the dead worker",
                f"{len(r.batches())} batches then {r.last()}, no error{replay}",
            )
            return
        grade.bounded(
            PropertyName.WORKER_DEATH_RAISES,
            "death_reported_s",
            errors[0].dt,
            f"worker death raised{replay}",
        )
    if schedule.fault == "hang" and not any("timed out" in e.text for e in errors):
        grade.fail(
            PropertyName.ITERATION_TERMINATES,
            "a 'timed out' error for the hung fetch",
            f"{[e.text for e in errors]}, last {r.last()}{replay}",
        )
        return
    if schedule.fault == "raise":
        checks.raised(
            grade,
            errors[0] if errors else None,
            "ValueError",
            f"drawn-{schedule.at}",
            PropertyName.ITERATION_TERMINATES,
        )
