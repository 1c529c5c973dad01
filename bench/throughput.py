"""Throughput: batches per second, each loader in its own child, interleaved over repeats.

Each loader runs `measure` in a fresh interpreter (faultinject's sandbox, `start="spawn"`): the
same harness as every other figure, which bounds the run and reaps what a loader leaves behind.

Owns the workloads of the issue (cheap items: 64 floats, batch 4, 2 workers; costly items: 1 ms
of CPU work each; 1 MB items; a single-process baseline) and the ratio rows. A rate is measured
from the first batch to the last of one epoch (worker start-up excluded; it is reported
apart). Loaders run one after another, never together, and alternate over repeats so a change
in the machine's load hits each of them alike; the median of the repeats is reported.

Each rate's note also gives the CPU seconds per batch (the loader's process from the first batch
to the last, plus its reaped workers, start-up included): on a loaded machine the rate follows
the share of the cores the loader gets, while the CPU per batch is what it costs.
"""

from __future__ import annotations

import gc
import resource
import statistics
import time
from typing import Any

from bench import datasets
from bench.loaders import LOADERS
from bench.rows import Row, na
from faultinject import loaders, processes, sandbox

SECTION = "throughput"

# The targets for reference/torch, shown beside the ratios.
TARGETS = {"cheap": 3.0, "costly": 1.0}


def workloads(quick: bool) -> list[dict[str, Any]]:
    """The workloads, sized for ``--quick`` (seconds in all) or a full run (about a minute)."""
    cheap, costly, large = (60, 15, 8) if quick else (2000, 250, 100)

    def floats(batches: int, **kw: Any) -> dict[str, Any]:
        return {"kind": "floats", "n": 4 * batches, "width": 64, **kw}

    return [
        {"name": "cheap", "dataset": floats(cheap), "batch_size": 4, "num_workers": 2},
        {
            "name": "costly",
            "dataset": floats(costly, cost_s=0.001),
            "batch_size": 4,
            "num_workers": 2,
        },
        {
            "name": "1MB items",
            "dataset": floats(large, width=262_144),
            "batch_size": 4,
            "num_workers": 2,
        },
        {"name": "single-process", "dataset": floats(cheap), "batch_size": 4, "num_workers": 0},
    ]


DESCRIPTIONS = {
    "cheap": "cheap items (64 floats, batch 4, 2 workers)",
    "costly": "costly items (1 ms CPU each, batch 4, 2 workers)",
    "1MB items": "1 MB items (batch 4, 2 workers)",
    "single-process": "single-process baseline (cheap items, num_workers=0)",
}


def _self_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads (the pin thread too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu_s() -> float:
    """CPU seconds of the children reaped so far (the workers, once joined)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _one(loader_cls: type, work: dict[str, Any]) -> dict[str, Any]:
    """One epoch of `work`: batches/s from the first batch to the last, and CPU per batch."""
    before = {p.pid for p in processes.children()}
    spec = work["dataset"]
    dataset = datasets.Floats(spec["n"], cost_s=spec.get("cost_s", 0.0), width=spec["width"])
    loader = loader_cls(dataset, batch_size=work["batch_size"], num_workers=work["num_workers"])
    kids_before = _children_cpu_s()
    start = time.perf_counter()
    it = iter(loader)
    first = None
    main_first = 0.0
    count = 0
    for _batch in it:
        count += 1
        if first is None:
            first = time.perf_counter()
            main_first = _self_cpu_s()
    last = time.perf_counter()
    main_cpu = _self_cpu_s() - main_first
    del it, loader
    gc.collect()
    # Workers reaped at the epoch's end are in RUSAGE_CHILDREN (their start-up too).
    workers_cpu = _children_cpu_s() - kids_before
    return {
        "batches": count,
        "batches_per_s": (count - 1) / (last - first) if first is not None and count > 1 else None,
        "startup_s": (first - start) if first is not None else None,
        "leftover": len(processes.new_children(before)),
        "main_cpu_per_batch_s": main_cpu / (count - 1) if count > 1 else None,
        "workers_cpu_per_batch_s": workers_cpu / count if count else None,
    }


def measure(loader: str, works: list[dict[str, Any]]) -> dict[str, Any]:
    """The sandbox target: every workload against `loader`; workload -> figures (or a reason
    string, for a loader that fails one)."""
    loader_cls = loaders.resolve(loader)
    results: dict[str, Any] = {}
    for work in works:
        try:
            results[work["name"]] = _one(loader_cls, work)
        except Exception as exc:  # a failing loader is a row with a reason, not a dead bench
            results[work["name"]] = na(exc)
    return results


def _run(loader: str, works: list[dict[str, Any]], deadline_s: float) -> dict[str, Any]:
    """One fresh interpreter running every workload; workload -> figures (or a reason)."""
    report = sandbox.run(
        measure, LOADERS[loader], works, deadline_s=deadline_s * len(works), start="spawn"
    )
    if report.outcome == "returned" and isinstance(report.value, dict):
        return report.value
    error = (report.error or report.outcome).strip().splitlines()[-1:] or [report.outcome]
    reason = f"n/a: no result within {deadline_s:g} s per workload: {error[0][:200]}"
    return dict.fromkeys((work["name"] for work in works), reason)


def rows(loaders: dict[str, str | None], quick: bool, repeats: int, deadline_s: float) -> list[Row]:
    """Rates per workload and loader, then the ratios to torch."""
    works = workloads(quick)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, miss in loaders.items() if not miss}
    for _ in range(repeats):
        for loader in runs:
            runs[loader].append(_run(loader, works, deadline_s))
    medians: dict[tuple[str, str], float] = {}
    cpus: dict[tuple[str, str], float] = {}
    out: list[Row] = []
    for work in works:
        label = DESCRIPTIONS[work["name"]]
        for loader, missing in loaders.items():
            name = f"{label}: {loader}"
            if missing:
                out.append(Row(SECTION, name, None, "batches/s", f"n/a: {missing}"))
                continue
            found = [r[work["name"]] for r in runs[loader]]
            rates = [
                f["batches_per_s"] for f in found if isinstance(f, dict) and f["batches_per_s"]
            ]
            if not rates:
                reason = next((f for f in found if isinstance(f, str)), "n/a: no rate")
                out.append(Row(SECTION, name, None, "batches/s", reason))
                continue
            medians[(work["name"], loader)] = statistics.median(rates)
            events = [f for f in found if isinstance(f, dict)]
            startup = statistics.median(f["startup_s"] for f in events)
            leftover = max(f["leftover"] for f in events)
            note = (
                f"{len(rates)} run(s), {events[0]['batches']} batches, first batch {startup:.2f} s"
            )
            cpu = _cpu_per_batch(events)
            if cpu is not None:
                cpus[(work["name"], loader)] = cpu[0] + cpu[1]
                note += f", CPU {(cpu[0] + cpu[1]) * 1e6:,.0f} us/batch"
                if work["num_workers"]:
                    note += f" (main {cpu[0] * 1e6:,.0f} + workers {cpu[1] * 1e6:,.0f})"
            if leftover:
                note += f", {leftover} process(es) left after the epoch"
            out.append(Row(SECTION, name, medians[(work["name"], loader)], "batches/s", note))
    for work in works:
        for loader in loaders:
            if loader == "torch":
                continue
            name = f"ratio {loader}/torch, {work['name']}"
            mine, theirs = medians.get((work["name"], loader)), medians.get((work["name"], "torch"))
            if mine is None or theirs is None:
                out.append(Row(SECTION, name, None, "x", "n/a: a rate above is missing"))
                continue
            target = TARGETS.get(work["name"]) if loader == "reference" else None
            note = ""
            if target:
                note = f"target >= {target:g}x: {'met' if mine / theirs >= target else 'missed'}"
            mine_cpu, theirs_cpu = (
                cpus.get((work["name"], loader)),
                cpus.get((work["name"], "torch")),
            )
            if mine_cpu and theirs_cpu:
                cpu_note = f"CPU per batch: torch uses {theirs_cpu / mine_cpu:.2f}x {loader}'s"
                note = f"{note}; {cpu_note}" if note else cpu_note
            out.append(Row(SECTION, name, mine / theirs, "x", note))
    return out


def _cpu_per_batch(events: list[dict[str, Any]]) -> tuple[float, float] | None:
    """Median (main, workers) CPU seconds per batch over the runs, or None if not measured."""
    pairs = [
        (e["main_cpu_per_batch_s"], e["workers_cpu_per_batch_s"])
        for e in events
        if e.get("main_cpu_per_batch_s") is not None
        and e.get("workers_cpu_per_batch_s") is not None
    ]
    if not pairs:
        return None
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
