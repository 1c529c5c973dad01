"""Resume: what checkpointing costs each loader that has ``state_dict()``/``load_state_dict()``.

The reference beside torchdata's StatefulDataLoader (its default ``snapshot_every_n_steps=1``)
and the torchdata.nodes pipelines, in one run (issue 19, docs/checkpoint.md):

* **throughput with a checkpoint after every batch**: the cheap workload (64 floats per item,
  batch 4, 2 workers), batches/s with ``state_dict()`` after every batch and without, each over
  the throughput section's window, measured in one epoch in alternating segments (``_rates``:
  a change of load hits both alike); the row is the ratio every / never, median and range over
  the repeats. The reference's target: it costs at most 5 % (the
  whole range at or above 0.95). Then the rate with a checkpoint after every batch against
  StatefulDataLoader's, paired repeat by repeat (target: ahead, the whole range above 1);
* **``state_dict()`` latency** against the dataset's size (1e3, 1e6 items, shuffled with a
  seeded generator) and ``num_workers`` (1, 2; ``--quick``: 2), the median of ``CALLS`` calls
  a few batches into an epoch (with 2 workers: the resume's source loader, ``AT`` batches in);
* **resume latency**: the time from ``load_state_dict()`` of a state taken ``AT`` batches into
  the epoch to the resumed loader's first batch (a new loader, new workers), per dataset size;
* **state size**: ``torch.save`` bytes of that state, per dataset size (the reference's must not
  grow with the dataset).

Each loader runs every figure in one fresh interpreter (faultinject's sandbox, spawn), loaders
alternating over the repeats, as the throughput section does. A loader without the methods, not
installed, or failing a figure gives rows ``n/a: <why>``.
"""

from __future__ import annotations

import copy
import functools
import gc
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from loaderspec.faultinject import loaders, sandbox

from bench import datasets
from bench.loaders import LOADERS
from bench.rows import Row, na
from bench.throughput import WINDOW_S, Interval, alternate

SECTION = "resume"
# The loaders that checkpoint, in the report's order (torch's DataLoader has no state_dict()).
RESUME_LOADERS = ("reference", "torchdata", "nodes-thread", "nodes-process")
SIZES = (1_000, 1_000_000)
WORKERS = (1, 2)
CALLS = {False: 200, True: 20}  # state_dict() calls timed per point
AT = 20  # batches handed out before the state a resume loads
BATCH = 4
EVERY_TARGET = 0.95  # the reference: state_dict() after every batch costs at most 5 %
# Cheap items: an epoch that outlasts both rates' windows (4 s) at ~20,000 batches/s.
CHEAP_BATCHES = {False: 80_000, True: 10_000}
SEGMENTS = 8  # the rates' windows, cut into alternating segments


def _make(loader_cls: type, n: int, workers: int, shuffle: bool) -> Any:
    """A loader of ``n`` cheap items (batch 4); shuffled ones draw from a seeded generator."""
    dataset = datasets.Floats(n)
    if not shuffle:
        return loader_cls(dataset, batch_size=BATCH, num_workers=workers)
    generator = torch.Generator().manual_seed(0)
    return loader_cls(
        dataset, batch_size=BATCH, num_workers=workers, shuffle=True, generator=generator
    )


def _rates(loader_cls: type, window_s: float, quick: bool) -> tuple[float, float]:
    """Cheap batches/s without and with ``state_dict()`` after each batch, in one epoch: after
    the first batch, ``SEGMENTS`` segments of ``window_s / SEGMENTS * 2`` seconds alternate
    between the two, so that each rate is measured over ``window_s`` and a change of the
    machine's load hits both alike (two windows one after the other differed by +-35 % at load
    6-8). Returns (never, every)."""
    loader = _make(loader_cls, CHEAP_BATCHES[quick] * BATCH, 2, shuffle=False)
    it = iter(loader)
    next(it)
    loader.state_dict()  # a loader that builds its state lazily builds it before the clock
    segment = window_s * 2 / SEGMENTS
    counts, spent = [0, 0], [0.0, 0.0]
    for k in range(SEGMENTS):
        every = k % 2
        count, started = 0, time.perf_counter()
        while True:
            next(it)
            count += 1
            if every:
                loader.state_dict()
            if time.perf_counter() - started >= segment:
                break
        counts[every] += count
        spent[every] += time.perf_counter() - started
    del it, loader
    gc.collect()
    return counts[0] / spent[0], counts[1] / spent[1]


def _size(state: Any) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.tell()


def _call_time(loader: Any, calls: int) -> float:
    """The median seconds of one ``loader.state_dict()`` over ``calls`` calls."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        loader.state_dict()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _latency(loader_cls: type, n: int, workers: int, calls: int) -> float:
    """The median seconds of one ``state_dict()``, a few batches into an epoch."""
    loader = _make(loader_cls, n, workers, shuffle=True)
    it = iter(loader)
    for _ in range(3):
        next(it)
    took = _call_time(loader, calls)
    del it, loader
    gc.collect()
    return took


def _resume(loader_cls: type, n: int, calls: int) -> dict[str, float]:
    """A state taken ``AT`` batches in (2 workers): ``state_dict()``'s latency there, the
    state's size, and the seconds from a new loader's ``load_state_dict()`` to its first batch."""
    source = _make(loader_cls, n, 2, shuffle=True)
    it = iter(source)
    for _ in range(AT):
        next(it)
    latency = _call_time(source, calls)
    state = copy.deepcopy(source.state_dict())
    del it, source
    gc.collect()
    size = _size(state)
    resumed = _make(loader_cls, n, 2, shuffle=True)
    started = time.perf_counter()
    resumed.load_state_dict(state)
    it = iter(resumed)
    next(it)
    took = time.perf_counter() - started
    del it, resumed
    gc.collect()
    return {"size_bytes": size, "first_batch_s": took, "latency_s": latency}


def _safely(figure: Callable[[], Any]) -> Any:
    try:
        return figure()
    except Exception as exc:  # a loader failing one figure is a row with a reason
        return na(exc)


def measure(loader: str, quick: bool, window_s: float) -> dict[str, Any]:
    """The sandbox target: every figure of one loader (a figure, or a reason string)."""
    cls = loaders.resolve(loader)
    if not (
        callable(getattr(cls, "state_dict", None))
        and callable(getattr(cls, "load_state_dict", None))
    ):
        return {"missing": "n/a: no state_dict()/load_state_dict()"}
    rates = _safely(lambda: _rates(cls, window_s, quick))
    never, every = rates if isinstance(rates, tuple) else (rates, rates)
    out: dict[str, Any] = {"never": never, "every": every}
    for n in SIZES:
        resumed = out[f"resume {n}"] = _safely(functools.partial(_resume, cls, n, CALLS[quick]))
        for w in WORKERS:
            if w == 2:  # the resume's source loader: 2 workers, AT batches in
                latency = resumed["latency_s"] if isinstance(resumed, dict) else resumed
            elif quick:
                latency = "n/a: --quick times 2 workers only"
            else:
                latency = _safely(functools.partial(_latency, cls, n, w, CALLS[quick]))
            out[f"latency {n} {w}"] = latency
    return out


def _run(loader: str, quick: bool, deadline_s: float) -> dict[str, Any]:
    report = sandbox.run(
        measure, LOADERS[loader], quick, WINDOW_S[quick], deadline_s=deadline_s, start="spawn"
    )
    if report.outcome == "returned" and isinstance(report.value, dict):
        return report.value
    error = (report.error or report.outcome).strip().splitlines()[-1:] or [report.outcome]
    return {"missing": f"n/a: no result within {deadline_s:g} s: {error[0][:200]}"}


def run_all(
    names: dict[str, str | None],
    quick: bool,
    repeats: int,
    deadline_s: float,
    progress: Callable[[str], None],
) -> dict[str, list[dict[str, Any]]]:
    """Every figure for every available checkpointing loader, ``repeats`` times, alternating."""
    available = [name for name in RESUME_LOADERS if name in names and not names[name]]
    return alternate(
        available, repeats, SECTION, progress, lambda loader: _run(loader, quick, deadline_s)
    )


def _pair(a: list[Any], b: list[Any]) -> Interval | None:
    return Interval.of(
        [x / y for x, y in zip(a, b, strict=True) if isinstance(x, float) and isinstance(y, float)]
    )


def _values(results: list[dict[str, Any]], key: str, field: str | None = None) -> list[Any]:
    """Per repeat, the figure (a number, or a reason string)."""
    out = []
    for result in results:
        value = result.get(key, result.get("missing", "n/a: not measured"))
        if field is not None and isinstance(value, dict):
            value = value[field]
        out.append(value)
    return out


def _figure(name: str, values: list[Any], unit: str, scale: float = 1.0, note: str = "") -> Row:
    numbers = [v * scale for v in values if isinstance(v, (int, float))]
    if not numbers:
        reason = next((v for v in values if isinstance(v, str)), "n/a: not measured")
        return Row(SECTION, name, None, unit, reason)
    spread = f"median of {len(numbers)}, {min(numbers):,.3g}-{max(numbers):,.3g}"
    return Row(SECTION, name, statistics.median(numbers), unit, f"{spread}{note}")


def _every_verdict(pair: Interval) -> str:
    """The 5 % target on the rates' ratio: judged only where the whole range is on one side."""
    if pair.low >= EVERY_TARGET:
        return f"target >= {EVERY_TARGET:g}x (costs <= 5 %): met"
    if pair.high < EVERY_TARGET:
        return f"target >= {EVERY_TARGET:g}x (costs <= 5 %): missed"
    return f"the range spans {EVERY_TARGET:g}x: the machine's noise, see the time share below"


def _share(loader: str, results: list[dict[str, Any]]) -> Row:
    """The time ``state_dict()`` adds to a cheap batch, per repeat: its latency (2 workers,
    1,000 items) times the rate without it, in per cent. Resolves what the rates' ratio cannot
    on a loaded machine; for a loader that snapshots inside ``next()`` (StatefulDataLoader)
    the call is not the whole cost: the every / never ratio is."""
    latency = _values(results, f"latency {SIZES[0]} 2")
    shares = [
        lat * rate * 100
        for lat, rate in zip(latency, _values(results, "never"), strict=True)
        if isinstance(lat, float) and isinstance(rate, float)
    ]
    name = f"state_dict() time per cheap batch: {loader}"
    if not shares:
        reason = next((v for v in latency if isinstance(v, str)), "n/a: a figure is missing")
        return Row(SECTION, name, None, "%", reason)
    note = f"median of {len(shares)}, {min(shares):.2g}-{max(shares):.2g} %"
    if loader == "reference":
        note += f"; target <= 5 %: {'met' if max(shares) <= 5 else 'missed'}"
    return Row(SECTION, name, statistics.median(shares), "%", note)


def rows(names: dict[str, str | None], runs: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """The figures per loader, the every/never ratios, and the reference against
    StatefulDataLoader with a checkpoint after every batch."""
    out: list[Row] = []
    for loader in (n for n in RESUME_LOADERS if n in names):
        results = runs.get(loader) or [{"missing": f"n/a: {names[loader]}"}]
        never, every = _values(results, "never"), _values(results, "every")
        label = "cheap items, state_dict() after every batch / never"
        pair = _pair(every, never)
        if pair is None:
            reason = next((v for v in every + never if isinstance(v, str)), "n/a")
            out.append(Row(SECTION, f"{label}: {loader}", None, "x", reason))
        else:
            rate = statistics.median(x for x in never if isinstance(x, float))
            note = f"{pair.text()}; never {rate:,.0f} batches/s"
            if loader == "reference":
                note += f"; {_every_verdict(pair)}"
            out.append(Row(SECTION, f"{label}: {loader}", pair.median, "x", note))
        out.append(_share(loader, results))
        for n in SIZES:
            for w in WORKERS:
                name = f"state_dict() latency, {n:,} items, {w} worker{'s' * (w > 1)}: {loader}"
                out.append(_figure(name, _values(results, f"latency {n} {w}"), "us", 1e6))
        for n in SIZES:
            name = f"first batch after load_state_dict(), {n:,} items: {loader}"
            out.append(_figure(name, _values(results, f"resume {n}", "first_batch_s"), "s"))
        sizes = {n: _values(results, f"resume {n}", "size_bytes") for n in SIZES}
        for n in SIZES:
            note = ""
            small, large = sizes[SIZES[0]], sizes[n]
            if n != SIZES[0] and all(isinstance(v, int) for v in small + large):
                grows = max(large) > max(small)
                note = f"; {'grows' if grows else 'the same'} as at {SIZES[0]:,} items"
                if loader == "reference":
                    note += f"; target no growth: {'missed' if grows else 'met'}"
            out.append(_figure(f"state size, {n:,} items: {loader}", sizes[n], "bytes", note=note))
    if "reference" in runs and "torchdata" in runs:
        name = "ratio reference/torchdata, cheap items with state_dict() after every batch"
        pair = _pair(_values(runs["reference"], "every"), _values(runs["torchdata"], "every"))
        if pair is None:
            out.append(Row(SECTION, name, None, "x", "n/a: a rate above is missing"))
        else:
            met = "met" if pair.verdict == "ahead" else "missed"
            note = f"{pair.text()}: {pair.verdict}; target ahead of StatefulDataLoader: {met}"
            out.append(Row(SECTION, name, pair.median, "x", note))
    return out
