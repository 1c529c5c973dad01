"""Fault figures: worker-death report latency and later ``next()`` calls, orphan exit after the
parent's SIGKILL (idle, busy in ``__getitem__``, blocked on a full pipe), stuck shutdown.

Owns running each fault scenario (``bench.scenarios``) in a child per run, bounding it, and
turning the runs into rows: one per figure and loader, the issue's target beside the
reference's, then "ratio torch/<loader>" rows (above 1: the loader is faster than torch). Every
wait has ``deadline_s``; a run that reaches it is reported as a lower bound (``> N s``, kept in
``Row.bound`` so the ratio is "more than"), and everything the child started is then killed by
PID."""

from __future__ import annotations

import contextlib
import os
import select
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.proc import Child, processes, wait_gone
from bench.rows import Row, na

SECTION = "faults"
STARTUP_S = 90.0  # a child importing torch and starting workers on 2 loaded cores


def _startup(child: Child) -> tuple[list[int] | None, str | None]:
    """Wait for the child's ``workers`` event; return the PIDs or the reason there are none."""
    event = child.event(STARTUP_S)
    if event is None:
        return None, f"n/a: no workers within {STARTUP_S:.0f} s: {child.stderr_tail()}"
    if event.get("event") != "workers":
        return None, na(event.get("error", event))
    pids = event["pids"]
    child.remember(processes(pids))
    if not pids:
        return None, "n/a: the loader started no worker processes"
    return pids, None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


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
    for _ in range(runs):
        spec = {"scenario": "worker_death", "loader": loader, "delay_s": 0.02}
        with Child(spec) as child:
            _pids, reason = _startup(child)
            if reason:
                return [
                    Row(SECTION, name, None, "ms", reason),
                    Row(SECTION, later_name, None, "ms", reason),
                ]
            event = child.event(deadline_s)
            after = child.event(deadline_s) if event and event.get("outcome") == "raised" else None
        if event is None:
            hangs += 1
        elif event.get("outcome") == "raised":
            latencies.append(event["latency_s"] * 1000)
            notes.append(event["error"])
            if after is None:
                later["hung"] += 1
            elif after.get("event") != "later":  # an error outside next(): still an error
                later["raised"] += 1
            else:  # a batch handed out after the error is "not fail-stop", however it ended
                later["batches" if after["batches"] else after["outcome"]] += 1
                handed_out += after["batches"]
                if after["outcome"] == "raised" and after["batches"] == 0:
                    later_ms.append(after["first_s"] * 1000)
        elif event.get("outcome") == "StopIteration":
            silent += 1
        else:  # the scenario itself failed (e.g. an asynchronous error outside next())
            failed.append(na(event.get("error", event)))
    if failed and len(failed) == runs:
        return [
            Row(SECTION, name, None, "ms", failed[0]),
            Row(SECTION, later_name, None, "ms", failed[0]),
        ]
    detail = f"{runs} runs: {len(latencies)} raised, {hangs} hung > {deadline_s:g} s"
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
    seen = sum(later.values())
    later_detail = (
        f"{seen} runs: {later['raised']} raised at once, {later['batches']} still handed out "
        f"batches ({handed_out} in all), {later['StopIteration']} ended (StopIteration), "
        f"{later['hung']} hung > {deadline_s:g} s"
    )
    bounded = seen > 0 and later["raised"] == seen and bool(later_ms)
    if loader == "reference":
        later_detail += f"; target fail-stop: {'met' if bounded else 'missed'}"
    if not seen:
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


def _wait_lines(fifo_fd: int, pids: list[int], deadline: float) -> bool:
    """Read worker PIDs from the FIFO until every one of ``pids`` has written, or the deadline."""
    seen: set[int] = set()
    buffer = b""
    while not set(pids) <= seen:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fifo_fd], [], [], left)
        if not ready:
            return False
        with contextlib.suppress(BlockingIOError):
            buffer += os.read(fifo_fd, 4096)
        *lines, buffer = buffer.split(b"\n")
        seen.update(int(line) for line in lines if line.strip())
    return True


def _in_pipe_write(pid: int) -> bool:
    """Whether a thread of ``pid`` is blocked in the kernel writing to a full pipe (Linux)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            if "pipe_write" in (task / "wchan").read_text():
                return True
    return False


BLOCKED_POLL_S = 0.01  # looking at /proc: the kernel sends no event for "blocked in write"


def _wait_blocked(fifo_fd: int, pids: list[int], deadline: float) -> bool:
    """Until every worker has fetched an item and a worker thread waits on a full pipe.

    With one shared result pipe (torch) the other worker waits for the writer's lock, not in
    ``pipe_write``; so one blocked writer is the condition, once every worker has fetched.
    """
    if not _wait_lines(fifo_fd, pids, deadline):
        return False
    while not any(_in_pipe_write(pid) for pid in pids):
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        # Bounded look at kernel state; the FIFO is only the tick (its lines are not needed).
        select.select([], [], [], min(left, BLOCKED_POLL_S))
    return True


STATES = {
    "idle": "idle",
    "busy": "busy in __getitem__",
    "blocked": "blocked on a full pipe",
}


def orphan_exit(loader: str, state: str, runs: int, deadline_s: float) -> Row:
    """After SIGKILL of the loader's process: seconds until its last worker has exited."""
    name = f"orphan exit after parent SIGKILL, {STATES[state]} ({loader})"
    figures: list[float] = []
    stuck = 0
    workers = 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            fifo = str(Path(tmp, "ready"))
            os.mkfifo(fifo)
            # O_RDWR: holding both ends, neither we nor a worker's open() ever blocks.
            fifo_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            try:
                spec = {"scenario": "orphan", "loader": loader, "state": state, "fifo": fifo}
                with Child(spec) as child:
                    pids, reason = _startup(child)
                    if reason:
                        return Row(SECTION, name, None, "s", reason)
                    assert pids is not None
                    ready_by = time.monotonic() + STARTUP_S
                    if state == "busy" and not _wait_lines(fifo_fd, pids, ready_by):
                        return Row(SECTION, name, None, "s", "n/a: workers never became busy")
                    if state == "blocked" and not _wait_blocked(fifo_fd, pids, ready_by):
                        return Row(SECTION, name, None, "s", "n/a: no worker blocked on a pipe")
                    procs = processes(pids)
                    child.sigkill()
                    exits = wait_gone(procs, deadline_s)
            finally:
                os.close(fifo_fd)
        workers = len(exits)
        left = [pid for pid, t in exits.items() if t is None]
        if left:
            stuck += len(left)
        else:
            figures.append(max(t for t in exits.values() if t is not None))
    detail = f"{runs} run(s) x {workers} workers"
    if stuck:
        return Row(
            SECTION,
            name,
            None,
            "s",
            _join(
                f"> {deadline_s:g} s: {stuck} worker(s) still running at the deadline over "
                f"{detail} (then killed by PID)",
                _target_note(loader, None, TARGET_S, "s"),
            ),
            bound=deadline_s,
        )
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


def shutdown_stuck(loader: str, runs: int, deadline_s: float) -> Row:
    """Seconds for ``del it, loader`` to return with one worker stuck in ``__getitem__``."""
    name = f"shutdown (del it, loader) with a stuck worker ({loader})"
    figures: list[float] = []
    leftovers: list[str] = []
    for _ in range(runs):
        spec: dict[str, Any] = {"scenario": "shutdown_stuck", "loader": loader}
        with Child(spec) as child:
            _pids, reason = _startup(child)
            if reason:
                return Row(SECTION, name, None, "s", reason)
            event = child.event(deadline_s)
        if event is None:
            return Row(
                SECTION,
                name,
                None,
                "s",
                _join(
                    f"> {deadline_s:g} s: del did not return",
                    _target_note(loader, None, TARGET_S, "s"),
                ),
                bound=deadline_s,
            )
        if event.get("event") != "shutdown":
            return Row(SECTION, name, None, "s", na(event.get("error", event)))
        figures.append(event["shutdown_s"])
        if event["alive"] or event["zombies"]:
            leftovers.append(f"{len(event['alive'])} alive, {len(event['zombies'])} zombie")
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


def rows(loaders: dict[str, str | None], quick: bool, deadline_s: float) -> list[Row]:
    """Every fault figure for every loader, then ratios to torch; unavailable loaders get n/a."""
    runs_death = 1 if quick else 10
    runs_other = 1 if quick else 2

    def death(name: str) -> list[Row]:
        return worker_death(name, runs_death, deadline_s)

    def orphans(state: str, runs: int) -> Any:
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
    for labels, measure in measures:
        found: dict[str, list[Row]] = {}
        for loader, missing in loaders.items():
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
