"""Throughput: batches per second over sweeps of item cost, item size, batch size and workers.

Each loader runs every workload in one fresh interpreter (faultinject's sandbox, `start="spawn"`,
the harness every other figure uses: it bounds the run and reaps and reports what a loader
leaves behind: processes, zombies, fds, threads, /dev/shm entries). Loaders run one after
another, never together, and alternate over the repeats so a change in the machine's load hits
each of them alike; min / median / max of the repeats are reported, and every ratio to torch is
taken between figures of the same run.

Owns the workloads: one-axis sweeps around the issue's cheap workload (64 floats per item,
batch 4, 2 workers): item cost (0, 0.1 ms, 1 ms of CPU), item size (64 floats .. 4 MB), batch
size (1 .. 64) and workers (1 .. 4), plus the single-process baseline. A rate is measured from
the first batch to the last of one epoch (the shutdown after it is not counted); the first
batch's latency is reported apart. Beside each rate: the CPU per batch of the loader's process
(first batch to last) and of its reaped workers (start-up and shutdown included); the peak,
over samples taken during the epoch, of the RSS summed over the loader's processes, its open
fds, threads and worker processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench import datasets
from bench.loaders import LOADERS
from bench.rows import Row, na
from faultinject import loaders, processes, sandbox

SECTION = "throughput"
PEERS_EXCLUDED = ("torch", "reference")  # the rest are the peers the reference is ranked against
# A workload's epoch is cut at this many seconds after its first batch (quick: True): a slow
# loader is measured over the batches it gave by then, so one loader cannot hold up the run.
MAX_EPOCH_S = {False: 10.0, True: 2.0}


@dataclasses.dataclass(frozen=True)
class Workload:
    """One point of a sweep. ``axis``/``value`` say which sweep it belongs to (the base
    workload belongs to all four)."""

    name: str
    label: str
    batches: int
    cost_s: float = 0.0
    width: int = 64  # float32 per item
    batch_size: int = 4
    num_workers: int = 2
    axes: tuple[str, ...] = ()

    def value(self, axis: str) -> float:
        """This workload's coordinate on ``axis`` (for the plots)."""
        return {
            "cost": self.cost_s * 1e3,
            "size": self.width * 4,
            "batch": self.batch_size,
            "workers": self.num_workers,
        }[axis]


# The targets for reference / torch (same run), and for reference / the best peer.
TARGETS = {"cheap": 6.0, "costly": 1.6, "1MB items": 4.0}
PEER_TARGETS = {"cheap": 1.0, "1MB items": 1.0}
AXES = {
    "cost": "item cost (ms of CPU)",
    "size": "item size (bytes)",
    "batch": "batch size",
    "workers": "num_workers",
}


def workloads(quick: bool) -> list[Workload]:
    """The sweeps, sized for ``--quick`` (seconds in all) or a full run (a few minutes)."""

    def n(full: int) -> int:
        return max(4, full // 25) if quick else full

    return [
        Workload(
            "cheap",
            "cheap items (64 floats, batch 4, 2 workers)",
            n(2000),
            axes=("cost", "size", "batch", "workers"),
        ),
        Workload("0.1 ms items", "0.1 ms CPU per item", n(800), cost_s=1e-4, axes=("cost",)),
        Workload(
            "costly",
            "costly items (1 ms CPU each, batch 4, 2 workers)",
            n(250),
            cost_s=1e-3,
            axes=("cost",),
        ),
        Workload("64KB items", "64 KB items", n(1000), width=16_384, axes=("size",)),
        Workload(
            "1MB items", "1 MB items (batch 4, 2 workers)", n(150), width=262_144, axes=("size",)
        ),
        Workload("4MB items", "4 MB items", n(40), width=1_048_576, axes=("size",)),
        Workload("batch 1", "cheap items, batch 1", n(2000), batch_size=1, axes=("batch",)),
        Workload("batch 16", "cheap items, batch 16", n(1000), batch_size=16, axes=("batch",)),
        Workload("batch 64", "cheap items, batch 64", n(400), batch_size=64, axes=("batch",)),
        Workload("1 worker", "cheap items, 1 worker", n(1500), num_workers=1, axes=("workers",)),
        Workload("3 workers", "cheap items, 3 workers", n(2000), num_workers=3, axes=("workers",)),
        Workload("4 workers", "cheap items, 4 workers", n(2000), num_workers=4, axes=("workers",)),
        Workload(
            "single-process",
            "single-process baseline (cheap items, num_workers=0)",
            n(2000),
            num_workers=0,
        ),
    ]


def _self_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads (a pin thread too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu_s() -> float:
    """CPU seconds of the children reaped so far (the workers, once joined)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _sample(me: psutil.Process) -> tuple[int, int, int, int]:
    """(RSS summed over this process and its descendants, fds, threads, descendants)."""
    kids = me.children(recursive=True)
    rss = me.memory_info().rss
    for kid in kids:
        with contextlib.suppress(psutil.Error):  # a worker may exit between the two calls
            rss += kid.memory_info().rss
    return rss, me.num_fds(), me.num_threads(), len(kids)


def _one(loader_cls: type, work: Workload, max_s: float) -> dict[str, Any]:
    """One epoch of ``work``: batches/s from the first batch to the last, CPU per batch, and
    the peaks of the loader's resources, sampled about 10 times during the epoch. A loader
    still going ``max_s`` after its first batch is measured over the batches it gave by then
    (and the epoch left early)."""
    me = psutil.Process()
    before = {p.pid for p in processes.children()}
    fds_before = me.num_fds()
    dataset = datasets.Floats(work.batches * work.batch_size, work.cost_s, work.width)
    loader = loader_cls(dataset, batch_size=work.batch_size, num_workers=work.num_workers)
    kids_before = _children_cpu_s()
    every = max(1, work.batches // 10)
    peaks = (0, 0, 0, 0)
    start = time.perf_counter()
    it = iter(loader)
    first = last = None
    main_first = main_cpu = 0.0
    count = 0
    _batch = None
    for _batch in it:
        count += 1
        if first is None:
            first = time.perf_counter()
            main_first = _self_cpu_s()
        if count % every == 0:
            # map(max, ...) over two equal-length tuples: mypy cannot see its length.
            peaks = tuple(map(max, peaks, _sample(me)))  # type: ignore[assignment]
        if count == work.batches or time.perf_counter() - first > max_s:
            # the rate stops at the last batch, before the shutdown
            last = time.perf_counter()
            main_cpu = _self_cpu_s() - main_first
            break
    if last is None:  # fewer batches than asked (a loader that lost some): up to the end
        last = time.perf_counter()
        main_cpu = _self_cpu_s() - main_first
    del it, loader, _batch
    gc.collect()
    # Workers reaped at the epoch's end are in RUSAGE_CHILDREN (their start-up too).
    workers_cpu = _children_cpu_s() - kids_before
    return {
        "batches": count,
        "cut_short": count < work.batches,
        "batches_per_s": (count - 1) / (last - first) if first is not None and count > 1 else None,
        "first_batch_s": (first - start) if first is not None else None,
        "main_cpu_per_batch_s": main_cpu / (count - 1) if count > 1 else None,
        "workers_cpu_per_batch_s": workers_cpu / count if count else None,
        "peak_rss_bytes": peaks[0],
        "peak_fds": peaks[1],
        "peak_threads": peaks[2],
        "peak_processes": peaks[3],
        "children_left": len(processes.new_children(before)),
        "fds_left": me.num_fds() - fds_before,
    }


def measure(loader: str, works: list[Workload], max_s: float) -> dict[str, Any]:
    """The sandbox target: every workload against ``loader``; workload name -> figures (or a
    reason string, for a loader that fails or refuses one)."""
    loader_cls = loaders.resolve(loader)
    results: dict[str, Any] = {}
    for work in works:
        try:
            results[work.name] = _one(loader_cls, work, max_s)
        except Exception as exc:  # a failing loader is a row with a reason, not a dead bench
            results[work.name] = na(exc)
    return results


def _run(loader: str, works: list[Workload], deadline_s: float, max_s: float) -> dict[str, Any]:
    """One fresh interpreter running every workload; workload -> figures (or a reason). What
    the run left behind (processes, fds, /dev/shm entries) is under the key ``"left"``."""
    report = sandbox.run(
        measure, LOADERS[loader], works, max_s, deadline_s=deadline_s * len(works), start="spawn"
    )
    if report.outcome == "returned" and isinstance(report.value, dict):
        return {**report.value, "left": report.leftovers()}
    error = (report.error or report.outcome).strip().splitlines()[-1:] or [report.outcome]
    reason = f"n/a: no result within {deadline_s:g} s per workload: {error[0][:200]}"
    return {**dict.fromkeys((work.name for work in works), reason), "left": ""}


def run_all(
    names: dict[str, str | None],
    quick: bool,
    repeats: int,
    deadline_s: float,
    progress: Callable[[str], None],
    only: list[str] | None = None,
) -> tuple[list[Workload], dict[str, list[dict[str, Any]]]]:
    """Every workload (or those named in ``only``) for every available loader, ``repeats``
    times, loaders alternating."""
    works = [w for w in workloads(quick) if not only or w.name in only]
    max_s = MAX_EPOCH_S[quick]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, miss in names.items() if not miss}
    total = repeats * len(runs)
    step = 0
    for repeat in range(repeats):
        for loader in runs:
            step += 1
            progress(f"throughput [{step}/{total}] {loader}, run {repeat + 1} of {repeats}")
            runs[loader].append(_run(loader, works, deadline_s, max_s))
    return works, runs


def _stats(found: list[Any], key: str) -> list[float]:
    return [f[key] for f in found if isinstance(f, dict) and f.get(key) is not None]


def summarize(works: list[Workload], runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """workload -> loader -> figures over the repeats (min/median/max rate, medians of the
    rest, peaks of the resources), or a reason string."""
    out: dict[str, Any] = {}
    for work in works:
        per: dict[str, Any] = {}
        for loader, results in runs.items():
            found = [r[work.name] for r in results]
            rates = _stats(found, "batches_per_s")
            if not rates:
                per[loader] = next((f for f in found if isinstance(f, str)), "n/a: no rate")
                continue
            med = statistics.median
            figures = [f for f in found if isinstance(f, dict)]
            per[loader] = {
                "runs": len(rates),
                "batches": figures[0]["batches"],
                "cut_short": any(f.get("cut_short") for f in figures),
                "min": min(rates),
                "median": med(rates),
                "max": max(rates),
                "first_batch_s": med(_stats(figures, "first_batch_s")),
                "main_cpu_us": med(_stats(figures, "main_cpu_per_batch_s")) * 1e6,
                "workers_cpu_us": med(_stats(figures, "workers_cpu_per_batch_s")) * 1e6,
                "peak_rss_mb": max(_stats(figures, "peak_rss_bytes")) / 2**20,
                "peak_fds": max(_stats(figures, "peak_fds")),
                "peak_threads": max(_stats(figures, "peak_threads")),
                "peak_processes": max(_stats(figures, "peak_processes")),
                "children_left": max(_stats(figures, "children_left")),
                "fds_left": max(_stats(figures, "fds_left")),
                "run_left": "; ".join(sorted({r["left"] for r in results if r["left"]})),
            }
        out[work.name] = per
    return out


def rows(works: list[Workload], summary: dict[str, Any], names: dict[str, str | None]) -> list[Row]:
    """Rates per workload and loader, then the ratios to torch and the reference's rank."""
    out: list[Row] = []
    for work in works:
        for loader, missing in names.items():
            name = f"{work.label}: {loader}"
            fig = summary[work.name].get(loader, f"n/a: {missing}")
            if isinstance(fig, str):
                out.append(Row(SECTION, name, None, "batches/s", fig))
                continue
            cut = " (epoch cut short)" if fig.get("cut_short") else ""
            note = (
                f"median of {fig['runs']}, {fig['min']:,.0f}-{fig['max']:,.0f}; {fig['batches']} "
                f"batches{cut}; first batch {fig['first_batch_s']:.2f} s; CPU "
                f"{fig['main_cpu_us'] + fig['workers_cpu_us']:,.0f} us/batch"
            )
            if work.num_workers:
                note += f" (main {fig['main_cpu_us']:,.0f} + workers {fig['workers_cpu_us']:,.0f})"
            note += (
                f"; peak RSS {fig['peak_rss_mb']:,.0f} MB, {fig['peak_fds']} fds, "
                f"{fig['peak_threads']} threads, {fig['peak_processes']} processes"
            )
            left = _left(fig)
            note += f"; left: {left or 'nothing'}"
            out.append(Row(SECTION, name, fig["median"], "batches/s", note))
    for work in works:
        for loader in names:
            if loader != "torch":
                out.append(_ratio(work, summary[work.name], loader))
        if "reference" in names and work.name in PEER_TARGETS:
            out.append(_rank(work, summary[work.name]))
    return out


def _left(fig: dict[str, Any]) -> str:
    parts = []
    if fig["children_left"]:
        parts.append(f"{fig['children_left']} process(es) after the epoch")
    if fig["fds_left"] > 0:
        parts.append(f"{fig['fds_left']} fd(s) after the epoch")
    if fig["run_left"]:
        parts.append(fig["run_left"])
    return ", ".join(parts)


def _median(per: dict[str, Any], loader: str) -> float | None:
    fig = per.get(loader)
    return fig["median"] if isinstance(fig, dict) else None


def _ratio(work: Workload, per: dict[str, Any], loader: str) -> Row:
    name = f"ratio {loader}/torch, {work.name}"
    mine, theirs = _median(per, loader), _median(per, "torch")
    if mine is None or theirs is None:
        return Row(SECTION, name, None, "x", "n/a: a rate above is missing")
    target = TARGETS.get(work.name) if loader == "reference" else None
    note = ""
    if target:
        note = f"target >= {target:g}x: {'met' if mine / theirs >= target else 'missed'}; "
        bound = cpu_bound(work)
        if bound is not None:
            note += (
                f"these CPUs allow at most {bound / theirs:.2f}x torch ({bound:,.0f}/s), "
                f"{loader} makes {mine / bound:.0%} of that; "
            )
    cpu = {who: per[who]["main_cpu_us"] + per[who]["workers_cpu_us"] for who in (loader, "torch")}
    if cpu[loader] > 0:
        note += f"CPU per batch: torch uses {cpu['torch'] / cpu[loader]:.2f}x {loader}'s"
    return Row(SECTION, name, mine / theirs, "x", note)


def cpu_bound(work: Workload) -> float | None:
    """The most batches/s a CPU-bound workload can give here: its workers (at most one per
    CPU) each doing ``batch_size * cost_s`` of CPU per batch and nothing else. None for a
    workload with no fixed work per item, or no workers."""
    if not work.cost_s or not work.num_workers:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(work.num_workers, cpus or 1) / (work.batch_size * work.cost_s)


def _rank(work: Workload, per: dict[str, Any]) -> Row:
    """reference / the fastest peer (not torch) in the same run, with the issue's target."""
    name = f"ratio reference/best peer, {work.name}"
    mine = _median(per, "reference")
    peers = {
        p: rate for p in per if p not in PEERS_EXCLUDED and (rate := _median(per, p)) is not None
    }
    if mine is None or not peers:
        return Row(SECTION, name, None, "x", "n/a: no reference or no peer rate")
    best = max(peers, key=peers.__getitem__)
    target = PEER_TARGETS[work.name]
    verdict = "met" if mine / peers[best] >= target else "missed"
    note = f"best peer {best} {peers[best]:,.0f}/s; target >= {target:g}x: {verdict}"
    return Row(SECTION, name, mine / peers[best], "x", note)
