"""Throughput: batches per second over sweeps of item cost, item size, batch size and workers.

Each loader runs every workload in one fresh interpreter (faultinject's sandbox, `start="spawn"`,
the harness every other figure uses: it bounds the run and reaps and reports what a loader
leaves behind: processes, zombies, fds, threads, /dev/shm entries). Loaders run one after
another, never together, and alternate over the repeats so a change in the machine's load hits
each of them alike. Every ratio is paired: repeat i of one loader against repeat i of the other
(the two ran minutes, not hours, apart), and the ratio is stated as the median of the paired
ratios with their range; over n repeats that range holds the true median ratio with probability
1 - 2^(1-n) (94 % for the default 5), and a verdict "ahead" / "behind" is given only when the
whole range is above / below 1 ("level" otherwise).

Owns the workloads: one-axis sweeps around the issue's cheap workload (64 floats per item, batch
4, 2 workers): item cost (0, 0.1 ms, 1 ms of CPU), item size (64 floats .. 4 MB), batch size (1
.. 64) and workers (1 .. 4; 6 and 8 in a full run), plus the single-process baseline. A rate is
measured over a fixed window of wall time after the first batch (``WINDOW_S``; the start-up and
the shutdown are not counted): an epoch of a fixed batch count lasted 0.1 s for the fastest
loaders, too short for a stable rate. The first batch's latency is reported apart. Beside each
rate: the CPU per batch of the loader's process and of its workers over the same window
(``bench.cpu``, the method every section uses); the peak, over samples taken about 10 times a
window, of the RSS summed over the loader's processes, its open fds, threads and worker
processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psutil
from loaderspec.faultinject import loaders, processes, sandbox

from bench import datasets
from bench.cpu import CpuWindow
from bench.loaders import LOADERS
from bench.rows import Row, na

SECTION = "throughput"
# ``--noise-floor``: the reference measured a second time, as if it were another loader: the
# paired ratio of the two is what the bench calls "level" on this machine (an A/A comparison).
NOISE_FLOOR = "reference (again)"
NOISE_FLOOR_OF = "reference"
# The rest are the peers the reference is ranked against.
PEERS_EXCLUDED = ("torch", "reference", NOISE_FLOOR)
# Each rate is measured over this many seconds after the epoch's first batch (quick: True):
# long enough that one scheduler hiccup is a small part of it (at 2 s the repeats' spread fell
# from +-30 % to a few %; docs/bench.md), short enough for a sweep of every loader. ``--window``
# sets another: on 2026-11-28, 8 s narrowed the A/A interval of cheap epochs from +-6 % (2 s)
# to +-4 %, and the one against torch from +-18 % to +-10 % (docs/bench.md), in four times the
# time. A workload's ``batches`` is the epoch's length, a
# cap sized to outlast the window at the fastest rates seen.
WINDOW_S = {False: 2.0, True: 0.2}


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


# The targets (#24), each met only where the whole interval clears it: reference /
# torch (same run); reference / the fastest peer, which must also be "ahead"; the reference's
# share of what the CPUs allow a CPU-bound workload (``cpu_bound``); its main process's CPU per
# batch (us); and its total CPU per batch below the fastest peer's (the workloads named).
TARGETS = {"cheap": 10.0, "1MB items": 6.0}
PEER_TARGETS = {"cheap": 1.3, "1MB items": 1.0}
CEILING_TARGETS = {"costly": 0.95}
MAIN_CPU_TARGETS_US = {"cheap": 25.0}
CPU_PEER_WORKLOADS = ("cheap",)
AXES = {
    "cost": "item cost (ms of CPU)",
    "size": "item size (bytes)",
    "batch": "batch size",
    "workers": "num_workers",
}


def workloads(quick: bool, window_s: float | None = None) -> list[Workload]:
    """The sweeps, sized for ``--quick`` (seconds in all) or a full run (a few minutes), each
    epoch long enough to outlast a rate's window of ``window_s`` (default ``WINDOW_S``)."""
    longer = max(1.0, (window_s or WINDOW_S[quick]) / WINDOW_S[quick])

    def n(full: int) -> int:
        # The full caps are 20x these: each outlasts a 2 s window at about 1.5x the fastest
        # rate seen here (60,000 cheap batches against ~20,000/s; 12,000 1 MB batches against
        # ~2,600/s: 3,000 ended inside the window on 2026-11-26); a longer window, longer caps.
        return math.ceil((max(4, full // 25) if quick else full * 20) * longer)

    return [
        Workload(
            "cheap",
            "cheap items (64 floats, batch 4, 2 workers)",
            n(3000),
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
        Workload("64KB items", "64 KB items", n(2500), width=16_384, axes=("size",)),
        Workload(
            "1MB items", "1 MB items (batch 4, 2 workers)", n(600), width=262_144, axes=("size",)
        ),
        Workload("4MB items", "4 MB items", n(160), width=1_048_576, axes=("size",)),
        Workload("batch 1", "cheap items, batch 1", n(2000), batch_size=1, axes=("batch",)),
        Workload("batch 16", "cheap items, batch 16", n(2000), batch_size=16, axes=("batch",)),
        Workload("batch 64", "cheap items, batch 64", n(1000), batch_size=64, axes=("batch",)),
        Workload("1 worker", "cheap items, 1 worker", n(4000), num_workers=1, axes=("workers",)),
        Workload("3 workers", "cheap items, 3 workers", n(3000), num_workers=3, axes=("workers",)),
        Workload("4 workers", "cheap items, 4 workers", n(3000), num_workers=4, axes=("workers",)),
        # 6 and 8 workers on 2 cores: where the scale sweep ends, left out of --quick (the
        # smoke run checks the rows, and each worker costs a start-up).
        *(
            []
            if quick
            else [
                Workload(
                    f"{k} workers",
                    f"cheap items, {k} workers",
                    n(3000),
                    num_workers=k,
                    axes=("workers",),
                )
                for k in (6, 8)
            ]
        ),
        Workload(
            "single-process",
            "single-process baseline (cheap items, num_workers=0)",
            n(4000),
            num_workers=0,
        ),
    ]


def _sample(me: psutil.Process) -> tuple[int, int, int, int]:
    """(RSS summed over this process and its descendants, fds, threads, descendants)."""
    kids = me.children(recursive=True)
    rss = me.memory_info().rss
    for kid in kids:
        with contextlib.suppress(psutil.Error):  # a worker may exit between the two calls
            rss += kid.memory_info().rss
    return rss, me.num_fds(), me.num_threads(), len(kids)


def _per_worker_memory(me: psutil.Process) -> tuple[float | None, float | None]:
    """The mean RSS and USS of the loader's worker processes (None without any). RSS counts
    the pages a forked worker shares with its parent; USS only the worker's own."""
    rss, uss = [], []
    for kid in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a worker may exit between the calls
            info = kid.memory_full_info()
            rss.append(info.rss)
            uss.append(info.uss)
    if not rss:
        return None, None
    return statistics.mean(rss), statistics.mean(uss)


def _one(loader_cls: type, work: Workload, window_s: float) -> dict[str, Any]:
    """One epoch of ``work``, measured over ``window_s`` seconds after its first batch (then
    left): batches/s, CPU per batch, and the peaks of the loader's resources, sampled about 10
    times a window. An epoch that ends inside the window is measured to its last batch and
    flagged ``ended_early`` (its cap is too small for this loader's rate)."""
    me = psutil.Process()
    before = {p.pid for p in processes.children()}
    fds_before = me.num_fds()
    dataset = datasets.Floats(work.batches * work.batch_size, work.cost_s, work.width)
    loader = loader_cls(dataset, batch_size=work.batch_size, num_workers=work.num_workers)
    # Resources are sampled by time, about 10 times a window: every 64 batches was ~190
    # samples a second at cheap rates, each a few /proc reads charged to the loader's CPU.
    every_s = window_s / 10
    peaks = (0, 0, 0, 0)
    cpu = CpuWindow()
    start = time.perf_counter()
    it = iter(loader)
    first = last = None
    count = 0
    _batch = None
    for _batch in it:
        count += 1
        now = time.perf_counter()
        if first is None:
            cpu.start()  # after the first batch: the workers have started and are read
            first = next_sample = time.perf_counter()
        elif now >= next_sample:
            # map(max, ...) over two equal-length tuples: mypy cannot see its length.
            peaks = tuple(map(max, peaks, _sample(me)))  # type: ignore[assignment]
            next_sample = now + every_s
        if now - first >= window_s:
            last = now  # the rate stops at the window's last batch, before the shutdown
            break
    ended_early = last is None
    if last is None:  # the epoch ended inside the window: measured up to its last batch
        last = time.perf_counter()
    used = cpu.stop() if first is not None and count > 1 else None
    if peaks[0] == 0:  # an epoch too short for a sample
        peaks = _sample(me)
    per_worker = _per_worker_memory(me)  # at the window's end, before the shutdown
    del it, loader, _batch
    gc.collect()
    main_cpu = workers_cpu = None
    if used is not None:
        main_cpu = used["main_s"] / (count - 1)
        if not used["workers_lost"]:  # a worker's CPU lost with it would read as too little
            workers_cpu = used["workers_s"] / (count - 1)
    return {
        "batches": count,
        "ended_early": ended_early,
        "batches_per_s": (count - 1) / (last - first) if first is not None and count > 1 else None,
        "first_batch_s": (first - start) if first is not None else None,
        "main_cpu_per_batch_s": main_cpu,
        "workers_cpu_per_batch_s": workers_cpu,
        "rss_per_worker_bytes": per_worker[0],
        "uss_per_worker_bytes": per_worker[1],
        "peak_rss_bytes": peaks[0],
        "peak_fds": peaks[1],
        "peak_threads": peaks[2],
        "peak_processes": peaks[3],
        "children_left": len(processes.new_children(before)),
        "fds_left": me.num_fds() - fds_before,
    }


def measure(loader: str, works: list[Workload], window_s: float) -> dict[str, Any]:
    """The sandbox target: every workload against ``loader``; workload name -> figures (or a
    reason string, for a loader that fails or refuses one)."""
    loader_cls = loaders.resolve(loader)
    results: dict[str, Any] = {}
    for work in works:
        try:
            results[work.name] = _one(loader_cls, work, window_s)
        except Exception as exc:  # a failing loader is a row with a reason, not a dead bench
            results[work.name] = na(exc)
    return results


def _run(loader: str, works: list[Workload], deadline_s: float, window_s: float) -> dict[str, Any]:
    """One fresh interpreter running every workload; workload -> figures (or a reason). What
    the run left behind (processes, fds, /dev/shm entries) is under the key ``"left"``."""
    target = LOADERS[NOISE_FLOOR_OF] if loader == NOISE_FLOOR else LOADERS[loader]
    report = sandbox.run(
        measure, target, works, window_s, deadline_s=deadline_s * len(works), start="spawn"
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
    window_s: float | None = None,
) -> tuple[list[Workload], dict[str, list[dict[str, Any]]]]:
    """Every workload (or those named in ``only``) for every available loader, ``repeats``
    times, loaders alternating, each rate over ``window_s`` seconds (default ``WINDOW_S``)."""
    window_s = window_s or WINDOW_S[quick]
    works = [w for w in workloads(quick, window_s) if not only or w.name in only]
    available = [name for name, miss in names.items() if not miss]
    runs = alternate(
        available,
        repeats,
        "throughput",
        progress,
        lambda loader: _run(loader, works, deadline_s, window_s),
    )
    return works, runs


def alternate(
    loaders: list[str],
    repeats: int,
    section: str,
    progress: Callable[[str], None],
    run: Callable[[str], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """``run(loader)`` ``repeats`` times for each loader, the loaders taking turns within each
    repeat (a drift of the machine's speed then hits every loader alike); loader -> results."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loaders}
    total, step = repeats * len(loaders), 0
    for repeat in range(repeats):
        for loader in loaders:
            step += 1
            progress(f"{section} [{step}/{total}] {loader}, run {repeat + 1} of {repeats}")
            runs[loader].append(run(loader))
    return runs


def _stats(found: list[Any], key: str) -> list[float]:
    return [f[key] for f in found if isinstance(f, dict) and f.get(key) is not None]


def _median_scaled(found: list[Any], key: str, scale: float) -> float | None:
    """The median of ``key`` over the repeats that have it, times ``scale`` (None: none has)."""
    values = _stats(found, key)
    return statistics.median(values) * scale if values else None


def _scaled(found: Any, key: str) -> float | None:
    """One repeat's ``key`` in us (None: the repeat has no figure)."""
    value = found.get(key) if isinstance(found, dict) else None
    return None if value is None else value * 1e6


def _total_cpu(found: Any) -> float | None:
    """One repeat's CPU per batch, the loader's process and its workers, in us (None: either
    is unknown; a loader with no worker processes counts as 0 there)."""
    main, workers = (
        _scaled(found, "main_cpu_per_batch_s"),
        _scaled(found, "workers_cpu_per_batch_s"),
    )
    return None if main is None or workers is None else main + workers


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
            interval = Interval.of(rates)
            assert interval is not None  # rates is not empty
            per[loader] = {
                "runs": len(rates),
                # per repeat, None where that repeat has no rate: the pairs of a paired ratio
                "rates": [f.get("batches_per_s") if isinstance(f, dict) else None for f in found],
                # per repeat too (us; None where unknown): the CPU targets' intervals
                "main_cpus": [_scaled(f, "main_cpu_per_batch_s") for f in found],
                "total_cpus": [_total_cpu(f) for f in found],
                "batches": med(_stats(figures, "batches")),
                "ended_early": any(f.get("ended_early") for f in figures),
                "min": min(rates),
                "median": med(rates),
                "max": max(rates),
                # the median's interval (the range up to 8 repeats), for the plots
                "low": interval.low,
                "high": interval.high,
                "first_batch_s": med(_stats(figures, "first_batch_s")),
                "main_cpu_us": _median_scaled(figures, "main_cpu_per_batch_s", 1e6),
                "workers_cpu_us": _median_scaled(figures, "workers_cpu_per_batch_s", 1e6),
                "rss_per_worker_mb": _median_scaled(figures, "rss_per_worker_bytes", 2**-20),
                "uss_per_worker_mb": _median_scaled(figures, "uss_per_worker_bytes", 2**-20),
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


def cpu_total_us(fig: dict[str, Any]) -> float | None:
    """A loader's CPU per batch, its process and its workers (None: either is unknown)."""
    main, workers = fig["main_cpu_us"], fig["workers_cpu_us"]
    return None if main is None or workers is None else main + workers


def _cpu_note(fig: dict[str, Any], work: Workload) -> str:
    """CPU per batch over the rate's window (``bench.cpu``): the total, and its split."""
    main, workers = fig["main_cpu_us"], fig["workers_cpu_us"]
    if main is None:
        return "n/a"
    if not work.num_workers:
        return f"{main:,.0f} us/batch"
    if workers is None:
        return f"main {main:,.0f} us/batch, workers n/a (a worker ended inside the window)"
    return f"{main + workers:,.0f} us/batch (main {main:,.0f} + workers {workers:,.0f})"


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
            cut = " (the epoch ended inside the window)" if fig.get("ended_early") else ""
            note = (
                f"median of {fig['runs']}, {fig['min']:,.0f}-{fig['max']:,.0f}; "
                f"{fig['batches']:,.0f} batches a window{cut}; "
                f"first batch {fig['first_batch_s']:.2f} s; CPU {_cpu_note(fig, work)}"
            )
            if fig.get("rss_per_worker_mb") is not None:
                note += (
                    f"; per worker RSS {fig['rss_per_worker_mb']:,.0f} MB"
                    f" (USS {fig['uss_per_worker_mb']:,.0f} MB)"
                )
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
        if "reference" in names:
            per = summary[work.name]
            if work.name in PEER_TARGETS:
                out.append(_rank(work, per))
            if work.name in CPU_PEER_WORKLOADS:
                out.append(_cpu_rank(work, per))
            if work.name in MAIN_CPU_TARGETS_US:
                out.append(_main_cpu(work, per))
            if work.name in CEILING_TARGETS:
                out.append(_ceiling(work, per))
        if NOISE_FLOOR in names:
            out.append(_noise_floor(work, summary[work.name]))
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


# The least coverage an interval is given: that of the range of 5 values (1 - 2^-4), the
# default repeats. With more repeats the interval drops the k - 1 lowest and highest values,
# the largest k that keeps this coverage (9 repeats: the 2nd to the 8th value, 96 %).
MIN_COVERAGE = 1 - 2**-4


def coverage(n: int, k: int) -> float:
    """The probability that the k-th lowest to the k-th highest of ``n`` values hold their true
    median (distribution-free: each value lies below the median with probability 1/2, so the
    count below is Binomial(n, 1/2), and the interval misses when fewer than k lie on a side)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def order_k(n: int) -> int:
    """The largest k whose interval (``coverage``) still holds the median with probability
    ``MIN_COVERAGE``; 1 (the range) where none does."""
    k = 1
    while 2 * (k + 1) <= n and coverage(n, k + 1) >= MIN_COVERAGE:
        k += 1
    return k


@dataclasses.dataclass(frozen=True)
class Interval:
    """The median of ``n`` values (ratios of paired repeats, or one loader's figure per repeat)
    and the k-th lowest to the k-th highest of them, which hold their true median with
    probability ``coverage`` (k = 1, the range, up to 8 values; ``order_k``)."""

    median: float
    low: float
    high: float
    n: int
    k: int = 1

    @property
    def coverage(self) -> float:
        return coverage(self.n, self.k)

    @property
    def verdict(self) -> str:
        """ "ahead" / "behind" only when the whole interval is above / below 1."""
        if self.n < 2:
            return "unresolved (one repeat)"
        return "ahead" if self.low > 1 else "behind" if self.high < 1 else "level"

    @classmethod
    def of(cls, values: list[float]) -> Interval | None:
        """The values, one per repeat (None: no repeat gave one)."""
        if not values:
            return None
        values = sorted(values)
        k = order_k(len(values))
        return cls(statistics.median(values), values[k - 1], values[-k], len(values), k)

    @property
    def half_width(self) -> float:
        """Half the interval's width, as a share of the median (the issue's "+-10 %")."""
        return (self.high - self.low) / 2 / self.median if self.median else math.inf

    def text(self, unit: str = "x", what: str = "paired repeats") -> str:
        def fmt(v: float) -> str:
            return f"{v:.2f}" if unit == "x" else f"{v:,.1f}"

        bounds = f"{fmt(self.low)}-{fmt(self.high)}"
        if self.k == 1:
            span = f"range {bounds}"
        else:
            span = f"interval {bounds} (values {self.k}-{self.n - self.k + 1} in order)"
        return (
            f"{fmt(self.median)}{unit}, {span} (+-{self.half_width:.0%}) over {self.n} {what}"
            f" ({self.coverage:.0%} interval)"
        )


def paired(per: dict[str, Any], mine: str, theirs: str, key: str = "rates") -> Interval | None:
    """``mine`` / ``theirs``, repeat by repeat, of the per-repeat figure ``key`` (the rates, or
    the CPU per batch ``total_cpus``); None where no repeat has both."""
    a, b = per.get(mine), per.get(theirs)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    return Interval.of([x / y for x, y in zip(a[key], b[key], strict=True) if x and y])


def _ratio(work: Workload, per: dict[str, Any], loader: str) -> Row:
    name = f"ratio {loader}/torch, {work.name}"
    pair = paired(per, loader, "torch")
    if pair is None:
        return Row(SECTION, name, None, "x", "n/a: a rate above is missing")
    target = TARGETS.get(work.name) if loader == "reference" else None
    note = f"{pair.text()}; "
    if target:
        # Met only when the whole interval clears the target, not its median alone.
        note += f"target >= {target:g}x: {'met' if pair.low >= target else 'missed'}; "
    bound = cpu_bound(work)
    if bound is not None:
        theirs = per["torch"]["median"]
        note += (
            f"these CPUs allow at most {bound / theirs:.2f}x torch ({bound:,.0f}/s), "
            f"{loader} makes {per[loader]['median'] / bound:.0%} of that; "
        )
    ours, theirs = cpu_total_us(per[loader]), cpu_total_us(per["torch"])
    if ours and theirs is not None:
        note += f"CPU per batch: torch uses {theirs / ours:.2f}x {loader}'s"
    return Row(SECTION, name, pair.median, "x", note)


def cpu_bound(work: Workload) -> float | None:
    """The most batches/s a CPU-bound workload can give here: its workers (at most one per
    CPU) each doing ``batch_size * cost_s`` of CPU per batch and nothing else. None for a
    workload with no fixed work per item, or no workers."""
    if not work.cost_s or not work.num_workers:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(work.num_workers, cpus or 1) / (work.batch_size * work.cost_s)


def _rank(work: Workload, per: dict[str, Any]) -> Row:
    """reference / the fastest peer (not torch) in the same run, paired repeat by repeat, with
    the verdict its interval allows and the issue's target."""
    name = f"ratio reference/best peer, {work.name}"
    best = _best_peer(per)
    pair = paired(per, "reference", best) if best else None
    if best is None or pair is None:
        return Row(SECTION, name, None, "x", "n/a: no reference or no peer rate")
    target = PEER_TARGETS[work.name]
    verdict = "met" if pair.low >= target and pair.verdict == "ahead" else "missed"
    note = (
        f"{_VERSUS.get(pair.verdict, pair.verdict)} the best peer {best} "
        f"({_median(per, best):,.0f}/s): {pair.text()}; "
        f"target >= {target:g}x: {verdict}"
    )
    return Row(SECTION, name, pair.median, "x", note)


# How a verdict reads before "the best peer".
_VERSUS = {"ahead": "ahead of", "level": "level with", "behind": "behind"}


def _best_peer(per: dict[str, Any]) -> str | None:
    """The fastest peer (not torch) by median rate in this run (None: no peer has a rate)."""
    peers = {
        p: rate for p in per if p not in PEERS_EXCLUDED and (rate := _median(per, p)) is not None
    }
    return max(peers, key=peers.__getitem__) if peers else None


def _cpu_rank(work: Workload, per: dict[str, Any]) -> Row:
    """The reference's CPU per batch (its process and its workers) over the fastest peer's,
    paired repeat by repeat; the target: below it, the whole interval under 1."""
    name = f"ratio reference/best peer, CPU per batch, {work.name}"
    best = _best_peer(per)
    pair = paired(per, "reference", best, "total_cpus") if best else None
    if best is None or pair is None:
        return Row(SECTION, name, None, "x", "n/a: no CPU per batch of the reference or a peer")
    mine, theirs = cpu_total_us(per["reference"]) or 0.0, cpu_total_us(per[best]) or 0.0
    note = (
        f"reference {mine:,.0f} us/batch, the fastest peer {best} {theirs:,.0f} us/batch: "
        f"{pair.text()}; target below the best peer's: {'met' if pair.high < 1 else 'missed'}"
    )
    return Row(SECTION, name, pair.median, "x", note)


def _main_cpu(work: Workload, per: dict[str, Any]) -> Row:
    """The reference's main-process CPU per batch over the repeats, against its target."""
    name = f"CPU per batch, main process, {work.name}: reference"
    fig = per.get("reference")
    found = (
        Interval.of([v for v in fig["main_cpus"] if v is not None])
        if isinstance(fig, dict)
        else None
    )
    if found is None:
        return Row(SECTION, name, None, "us", "n/a: no CPU figure")
    target = MAIN_CPU_TARGETS_US[work.name]
    verdict = "met" if found.high <= target else "missed"
    note = f"{found.text(' us', 'repeats')}; target <= {target:g} us: {verdict}"
    return Row(SECTION, name, found.median, "us", note)


def _ceiling(work: Workload, per: dict[str, Any]) -> Row:
    """The reference's rate as a share of what the CPUs allow this CPU-bound workload
    (``cpu_bound``), over the repeats, against its target."""
    name = f"share of the CPUs' ceiling, {work.name}: reference"
    bound = cpu_bound(work)
    fig = per.get("reference")
    rates = [r for r in fig["rates"] if r] if isinstance(fig, dict) else []
    found = Interval.of([100 * r / bound for r in rates]) if bound and rates else None
    if found is None or bound is None:
        return Row(SECTION, name, None, "%", "n/a: no rate, or no fixed work per item")
    target = CEILING_TARGETS[work.name]
    verdict = "met" if found.low >= 100 * target else "missed"
    note = (
        f"{found.text(' %', 'repeats')} of {bound:,.0f} batches/s (the workers doing nothing but "
        f"the items' work, one per CPU); target >= {target:.0%}: {verdict}"
    )
    return Row(SECTION, name, found.median, "%", note)


def _noise_floor(work: Workload, per: dict[str, Any]) -> Row:
    """The reference against itself (an A/A run): the spread the machine alone gives a ratio."""
    name = f"noise floor: {NOISE_FLOOR}/{NOISE_FLOOR_OF}, {work.name}"
    pair = paired(per, NOISE_FLOOR, NOISE_FLOOR_OF)
    if pair is None:
        return Row(SECTION, name, None, "x", "n/a: a rate above is missing")
    note = f"{pair.text()}; the same loader twice: {pair.verdict}"
    return Row(SECTION, name, pair.median, "x", note)
