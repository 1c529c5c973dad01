"""Fault figures: worker-death report latency and later ``next()`` calls, orphan exit after the
parent's SIGKILL (idle, busy in ``__getitem__``, blocked on a full pipe), stuck shutdown.

Each run is one ``faultinject.driver`` plan played in a fresh interpreter (the sandbox's
``start="spawn"``), the same harness the conformance suite and the spec scenarios use: the
driver kills, waits and times inside the loader's process, the sandbox times the orphans' exits
and reaps everything by PID. This module turns the runs into rows: one per figure and loader,
the issue's target beside the reference's, then "ratio torch/<loader>" rows (above 1: the loader
is faster than torch). Every wait is bounded; a run that reaches its deadline is reported as a
lower bound (``> N s``, kept in ``Row.bound`` so the ratio is "more than")."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from loaderspec.faultinject.driver import Await, Leave, Plan, Run, run
from loaderspec.faultinject.events import Awaited, Batch, Dropped, Error, Killed, LoaderDropped
from loaderspec.faultinject.faults import Hang
from loaderspec.faultinject.plans import WorkerState, parent_dies_while

from bench.loaders import LOADERS
from bench.rows import Row, na

SECTION = "faults"
STARTUP_S = 30.0  # a spawned child's loader starting its workers on 2 loaded cores
LATER_CALLS = 20  # next() calls after the worker-death error
DEATH_ITEM_S = 0.02  # every item takes this long: the workers always have a task in hand
HANGS_TO_STOP = 2  # worker death: stop a loader's runs once this many have all hung


def _play(loader: str, plan: Plan, deadline_s: float, **kw: Any) -> Run:
    """`plan` against the loader called `loader` in `LOADERS`, in a fresh interpreter."""
    return run(LOADERS[loader], plan, deadline_s=deadline_s, start="spawn", **kw)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _failed(r: Run) -> str | None:
    """Why a run measured nothing (the loader refused, the scenario raised), or None."""
    if r.refused:
        return f"n/a: {r.refused}"
    if r.report is not None and r.report.outcome == "raised":
        return na((r.report.error or "").strip().splitlines()[-1])
    return None


# --------------------------------------------------------------------------------------------


# The targets for the reference loader (docs/architecture.md, PromptFaultHandling).
TARGET_DEATH_MS = 50.0
TARGET_S = 0.5


def _target_note(loader: str, value: float | None, target: float, unit: str) -> str:
    if loader != "reference":
        return ""
    if value is None:
        return f"target <= {target:g} {unit}: missed"
    return f"target <= {target:g} {unit}: {'met' if value <= target else 'missed'}"


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _beyond(name: str, deadline_s: float, what: str, loader: str) -> Row:
    """A figure in seconds that reached its deadline: a lower bound, the target missed."""
    note = _join(f"> {deadline_s:g} s: {what}", _target_note(loader, None, TARGET_S, "s"))
    return Row(SECTION, name, None, "s", note, bound=deadline_s)


def _death_plan() -> Plan:
    """Two workers with a task in hand; after the first batch, one is SIGKILLed from outside;
    then `next()` until it raises, and up to `LATER_CALLS` calls after that."""
    return Plan(
        n=10_000,
        cost_s=DEATH_ITEM_S,
        kwargs={"batch_size": 1, "num_workers": 2},
        kill_worker_after=1,
        max_errors=LATER_CALLS,
        calls_after_error=LATER_CALLS,
    )


def _death(r: Run) -> dict[str, Any]:
    """What one worker-death run showed: how the first call after the kill ended, and later."""
    killed = r.first(Killed)
    if killed is None:
        return {"outcome": "failed", "error": "no worker was killed"}
    if not killed.pids:  # threads, or a pool the driver cannot see: nothing to kill
        return {"outcome": "no workers", "error": "the loader started no worker processes"}
    after = [e for e in r.calls() if e.t >= killed.t]
    first = next((i for i, e in enumerate(after) if not isinstance(e, Batch)), None)
    if first is None:
        return {"outcome": "hung"}
    ended = after[first]
    out: dict[str, Any] = {
        "outcome": "raised" if isinstance(ended, Error) else "StopIteration",
        "latency_s": ended.t - killed.t,
        "error": ended.text if isinstance(ended, Error) else "",
        "batches_after_kill": first,
    }
    later = after[first + 1 :]
    if isinstance(ended, Error) and r.report is not None and r.report.outcome == "deadline":
        out["later"] = {"outcome": "hung"}
    elif isinstance(ended, Error):
        batches = [e for e in later if isinstance(e, Batch)]
        last = later[-1].name if later else "error"
        out["later"] = {
            "outcome": "batches" if batches else ("StopIteration" if last == "stop" else "raised"),
            "batches": len(batches),
            "first_s": later[0].dt if later else 0.0,
        }
    return out


def worker_death(loader: str, runs: int, deadline_s: float) -> list[Row]:
    """Two rows: median time from a worker's SIGKILL to ``next()`` raising (hangs counted), and
    what later ``next()`` calls did (raised at once, handed out batches, ended, or hung)."""
    name = f"worker death -> error ({loader})"
    later_name = f"later next() after the error ({loader})"
    latencies: list[float] = []
    later_ms: list[float] = []
    notes: list[str] = []
    hangs = silent = 0
    failed: list[str] = []
    later = {"raised": 0, "batches": 0, "StopIteration": 0, "hung": 0}
    handed_out = 0
    done = 0
    for _ in range(runs):
        if done >= HANGS_TO_STOP and hangs + later["hung"] == done:
            break  # every run so far waited out its deadline: more would only wait again
        done += 1
        r = _play(loader, _death_plan(), STARTUP_S + 2 * deadline_s)
        reason = _failed(r)
        if reason:
            return [
                Row(SECTION, name, None, "ms", reason),
                Row(SECTION, later_name, None, "ms", reason),
            ]
        seen = _death(r)
        if seen["outcome"] == "no workers":  # the same in every run: say so after the first
            reason = f"n/a: {seen['error']}"
            return [
                Row(SECTION, name, None, "ms", reason),
                Row(SECTION, later_name, None, "ms", reason),
            ]
        if seen["outcome"] == "hung":
            hangs += 1
        elif seen["outcome"] == "raised":
            latencies.append(seen["latency_s"] * 1000)
            notes.append(seen["error"])
            after = seen["later"]
            later[after["outcome"]] += 1
            handed_out += after.get("batches", 0)
            if after["outcome"] == "raised":
                later_ms.append(after["first_s"] * 1000)
        elif seen["outcome"] == "StopIteration":
            silent += 1
        else:
            failed.append(na(seen["error"]))
    if failed and len(failed) == done:
        return [
            Row(SECTION, name, None, "ms", failed[0]),
            Row(SECTION, later_name, None, "ms", failed[0]),
        ]
    detail = f"{done} runs: {len(latencies)} raised, {hangs} hung > {deadline_s:g} s"
    if done < runs:
        detail += f" (stopped after {done}: every one hung)"
    if silent:
        detail += f", {silent} ended silently (StopIteration)"
    if failed:
        detail += f", {len(failed)} scenario error(s): {failed[0]}"
    if latencies:
        detail += f"; max {max(latencies):.0f} ms; {notes[-1][:120]}"
    value = _median(latencies)
    target = _target_note(loader, value if not hangs else None, TARGET_DEATH_MS, "ms")
    if value is None:
        death = Row(
            SECTION,
            name,
            None,
            "ms",
            _join(f"> {deadline_s:g} s: never raised: {detail}", target),
            bound=deadline_s * 1000 if hangs else None,
        )
    else:
        death = Row(SECTION, name, value, "ms", _join(detail, target))
    later_runs = sum(later.values())
    later_detail = (
        f"{later_runs} runs: {later['raised']} raised at once, {later['batches']} still handed out "
        f"batches ({handed_out} in all), {later['StopIteration']} ended (StopIteration), "
        f"{later['hung']} hung > {deadline_s:g} s"
    )
    bounded = later_runs > 0 and later["raised"] == later_runs and bool(later_ms)
    if loader == "reference":
        later_detail += f"; target fail-stop: {'met' if bounded else 'missed'}"
    if not later_runs:
        later_row = Row(
            SECTION,
            later_name,
            None,
            "ms",
            _join("n/a: the first next() never raised", _target_note(loader, None, 0, "")),
        )
    elif bounded:
        later_row = Row(
            SECTION, later_name, max(later_ms), "ms", _join("max; fail-stop", later_detail)
        )
    else:
        later_row = Row(
            SECTION,
            later_name,
            None,
            "ms",
            _join("not fail-stop", later_detail),
            bound=deadline_s * 1000 if later["hung"] else None,
        )
    return [death, later_row]


STATES = {
    "idle": "idle",
    "busy": "busy in __getitem__",
    "blocked": "blocked on a full pipe",
}


def orphan_exit(loader: str, state: WorkerState, runs: int, deadline_s: float) -> Row:
    """After SIGKILL of the loader's process: seconds until its last worker has exited."""
    name = f"orphan exit after parent SIGKILL, {STATES[state]} ({loader})"
    figures: list[float] = []
    stuck = 0
    workers = 0
    for _ in range(runs):
        r = _play(loader, parent_dies_while(state), 2 * STARTUP_S, orphan_grace_s=deadline_s)
        reason = _failed(r)
        if reason:
            return Row(SECTION, name, None, "s", reason)
        if any(not e.ok for e in r.of(0, Awaited)):
            return Row(SECTION, name, None, "s", f"n/a: the workers never became {state}")
        exits = {} if r.report is None else r.report.orphan_exit_s
        if not exits:
            return Row(SECTION, name, None, "s", "n/a: the loader started no worker processes")
        workers = len(exits)
        left = [pid for pid, t in exits.items() if t is None]
        if left:
            stuck += len(left)
        else:
            figures.append(max(t for t in exits.values() if t is not None))
    detail = f"{runs} run(s) x {workers} workers"
    if stuck:
        what = f"{stuck} worker(s) still running at the deadline over {detail} (then killed by PID)"
        return _beyond(name, deadline_s, what, loader)
    value = _median(figures)
    return Row(
        SECTION,
        name,
        value,
        "s",
        _join(
            f"median; {detail}; max {max(figures):.3f} s",
            _target_note(loader, value, TARGET_S, "s"),
        ),
    )


def _stuck_plan() -> Plan:
    """Worker 1 hangs in `__getitem__` at item 1; once it does, drop the iterator (and then the
    loader: torchdata's StatefulDataLoader keeps its iterator, so only both is a shutdown)."""
    return Plan(
        n=100,
        faults=(Hang(1),),
        kwargs={"batch_size": 1, "num_workers": 2},
        leave={0: Leave("drop", 1)},
        before_leave=Await("fault", index=1),
    )


def shutdown_stuck(loader: str, runs: int, deadline_s: float) -> Row:
    """Seconds for ``del it, loader`` to return with one worker stuck in ``__getitem__``."""
    name = f"shutdown (del it, loader) with a stuck worker ({loader})"
    figures: list[float] = []
    leftovers: list[str] = []
    for _ in range(runs):
        r = _play(loader, _stuck_plan(), STARTUP_S + deadline_s)
        reason = _failed(r)
        if reason:
            return Row(SECTION, name, None, "s", reason)
        if any(not e.ok for e in r.of(0, Awaited)):
            return Row(SECTION, name, None, "s", "n/a: no worker got stuck")
        drops = r.of(None, Dropped) + r.of(None, LoaderDropped)
        if len(drops) < 2:
            return _beyond(name, deadline_s, "del did not return", loader)
        figures.append(sum(e.dt for e in drops))
        report = r.report
        if report is not None and (report.lingering or report.zombies):
            leftovers.append(f"{len(report.lingering)} alive, {len(report.zombies)} zombie")
    value = _median(figures)
    detail = (
        f"median; {runs} run(s); max {max(figures):.3f} s; left behind: "
        f"{'; '.join(leftovers) if leftovers else 'nothing'}"
    )
    return Row(SECTION, name, value, "s", _join(detail, _target_note(loader, value, TARGET_S, "s")))


def ratio(label: str, unit: str, mine: Row, torch_row: Row, loader: str) -> Row:
    """torch's figure over ``loader``'s (how many times faster; "more than" for a bound)."""
    name = f"ratio torch/{loader}, {label}"
    if mine.value is None or mine.value <= 0:
        return Row(SECTION, name, None, "x", f"n/a: no {loader} figure")
    if torch_row.value is not None:
        return Row(SECTION, name, torch_row.value / mine.value, "x", f"above 1: {loader} is faster")
    if torch_row.bound is not None:
        times = torch_row.bound / mine.value
        return Row(
            SECTION,
            name,
            None,
            "x",
            f"> {times:,.0f} x (torch never finished within {torch_row.bound:g} {unit})",
            bound=times,
        )
    return Row(SECTION, name, None, "x", "n/a: no torch figure")


def rows(
    loaders: dict[str, str | None],
    quick: bool,
    deadline_s: float,
    progress: Callable[[str], None] = lambda _text: None,
) -> list[Row]:
    """Every fault figure for every loader, then ratios to torch; unavailable loaders get n/a."""
    runs_death = 1 if quick else 10
    runs_other = 1 if quick else 2

    def death(name: str) -> list[Row]:
        return worker_death(name, runs_death, deadline_s)

    def orphans(state: WorkerState, runs: int) -> Any:
        return lambda name: [orphan_exit(name, state, runs, deadline_s)]

    measures: list[tuple[list[tuple[str, str]], Any]] = [
        ([("worker death -> error", "ms"), ("later next() after the error", "ms")], death),
        ([("orphan exit after parent SIGKILL, idle", "s")], orphans("idle", runs_other)),
        ([("orphan exit after parent SIGKILL, busy in __getitem__", "s")], orphans("busy", 1)),
        (
            [("orphan exit after parent SIGKILL, blocked on a full pipe", "s")],
            orphans("blocked", 1),
        ),
        (
            [("shutdown (del it, loader) with a stuck worker", "s")],
            lambda name: [shutdown_stuck(name, runs_other, deadline_s)],
        ),
    ]
    out: list[Row] = []
    ratios: list[Row] = []
    for step, (labels, measure) in enumerate(measures, 1):
        found: dict[str, list[Row]] = {}
        for loader, missing in loaders.items():
            if not missing:
                progress(f"faults [{step}/{len(measures)}] {labels[0][0]} ({loader})")
            if missing:
                found[loader] = [
                    Row(SECTION, f"{label} ({loader})", None, unit, f"n/a: {missing}")
                    for label, unit in labels
                ]
                continue
            try:
                found[loader] = measure(loader)
            except Exception as exc:  # one broken scenario must not cost the other figures
                found[loader] = [
                    Row(SECTION, f"{label} ({loader})", None, unit, na(exc))
                    for label, unit in labels
                ]
        for i, (label, unit) in enumerate(labels):
            out.extend(found[loader][i] for loader in loaders)
            if "torch" not in loaders:
                continue
            for loader in loaders:
                if loader != "torch":
                    ratios.append(ratio(label, unit, found[loader][i], found["torch"][i], loader))
    return out + ratios
