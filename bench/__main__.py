"""``python -m bench`` (or ``loaderspec bench``): every installed loader side by side, in one run.

Sections: the transport cost per batch; throughput over sweeps of item cost, item size, batch
size and workers (batches/s min/median/max, first-batch latency, CPU per batch, peak RSS, fds,
threads and processes) with ratios to torch and the issue's targets; the fault figures of every
loader (worker death -> error and later ``next()``, orphans after the parent's SIGKILL idle /
busy / blocked, shutdown with a stuck worker) with ratios; the spec side (TLC states and seconds
as workers, prefetch and batches grow); the cost of checkpointing (``state_dict()`` after every
batch, its latency, the resume's first batch, the state's size) for the loaders that have it;
and, when asked, the conformance suite's wall time per
loader. A loader that cannot be imported, or a figure that cannot be measured, is a row
"n/a: <reason>"; a wait that reached its deadline is "> N s"; the run itself fails for neither.
A progress line goes to stderr; the tables to stdout; ``--out DIR`` gets results.json,
results.md and PNG plots. Timings on a shared machine are noisy: the load average is recorded
at the start and the end. See docs/bench.md."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any

import torch

from bench import faults, results, resume, spec, stages, suite, throughput, transport
from bench.loaders import LOADERS, unavailable_reason
from bench.rows import Row, render, to_json

SECTIONS = ("transport", "stages", "throughput", "faults", "spec", "resume", "suite")
# (the suite takes minutes per loader: only when asked)
DEFAULT_SECTIONS = ("transport", "stages", "throughput", "faults", "spec", "resume")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes, one run each")
    parser.add_argument("--out", type=Path, metavar="DIR", help="write results.md/.json + plots")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS,
        help=f"run only this section (repeatable; default: {', '.join(DEFAULT_SECTIONS)})",
    )
    parser.add_argument(
        "--loader",
        action="append",
        choices=list(LOADERS),
        help="compare only these loaders (repeatable; default: all)",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="bound on each fault wait (default: 6 with --quick, else 10)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="throughput repeats per loader (default 5: a 94 %% interval per ratio; quick: 1)",
    )
    parser.add_argument(
        "--window",
        type=_seconds,
        metavar="S",
        help="throughput: seconds each rate is measured over, after the epoch's first batch "
        f"(default {throughput.WINDOW_S[False]:g}; quick: {throughput.WINDOW_S[True]:g}); "
        "longer can give tighter intervals, in proportion more time",
    )
    parser.add_argument(
        "--noise-floor",
        action="store_true",
        help="throughput: also measure the reference a second time, as another loader, and "
        "print the ratio of the two (what 'level' means on this machine)",
    )
    parser.add_argument(
        "--workload",
        action="append",
        choices=[w.name for w in throughput.workloads(quick=False)],
        help="throughput: only these workloads (repeatable; default: every sweep point)",
    )
    return parser.parse_args(argv)


def _seconds(text: str) -> float:
    """A positive number of seconds (``--window``), or argparse's one-line error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds, e.g. 8")
    return value


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_at_start": load,
    }


def _progress(text: str) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"[bench {datetime.datetime.now():%H:%M:%S}, load {load:.1f}] {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections; print the tables; write the results folder and JSON if asked."""
    args = _parse(argv)
    sections = args.only or list(DEFAULT_SECTIONS)
    names = args.loader or list(LOADERS)
    loaders = {name: unavailable_reason(name) for name in names}
    # The A/A column exists in the throughput section only (the other sections are not ratios
    # of repeated rates).
    measured = dict(loaders)
    if args.noise_floor:
        measured[throughput.NOISE_FLOOR] = unavailable_reason(throughput.NOISE_FLOOR_OF)
    deadline = args.deadline if args.deadline is not None else (6.0 if args.quick else 10.0)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 5)
    meta: dict[str, Any] = {
        **machine(),
        "mode": "quick" if args.quick else "full",
        "deadline_s": deadline,
        "repeats": repeats,
        "window_s": args.window or throughput.WINDOW_S[args.quick],
        "loaders": {name: reason or "available" for name, reason in loaders.items()},
    }
    print(
        f"bench ({meta['mode']}): {meta['platform']}, {meta['cpus']} CPUs, "
        f"load {meta['loadavg_at_start']}, torch {meta['torch']}",
        flush=True,
    )
    for name, reason in loaders.items():
        if reason:
            print(f"skipping {name}: {reason}", flush=True)
    rows: list[Row] = []
    works: list[throughput.Workload] = []
    summary: dict[str, Any] = {}
    spec_points: list[dict[str, Any]] = []
    if "transport" in sections:
        _progress("transport")
        part = transport.rows(args.quick)
        rows += part
        print(render(part), flush=True)
    if "stages" in sections:
        part = stages.rows(loaders, args.quick, _progress)
        rows += part
        print(render(part), flush=True)
    if "throughput" in sections:
        works, runs = throughput.run_all(
            measured,
            args.quick,
            repeats,
            300.0,
            _progress,
            only=args.workload,
            window_s=args.window,
        )
        summary = throughput.summarize(works, runs)
        part = throughput.rows(works, summary, measured)
        rows += part
        print(render(part), flush=True)
    if "faults" in sections:
        part = faults.rows(loaders, args.quick, deadline, _progress)
        rows += part
        print(render(part), flush=True)
    if "spec" in sections:
        spec_timeout = 120.0 if args.quick else 600.0
        spec_points = spec.measure(args.quick, spec_timeout, _progress)
        part = spec.rows(spec_points, spec_timeout)
        rows += part
        print(render(part), flush=True)
    if "resume" in sections:
        runs = resume.run_all(loaders, args.quick, repeats, 300.0, _progress)
        part = resume.rows(loaders, runs)
        rows += part
        print(render(part), flush=True)
    if "suite" in sections:
        part = suite.rows(loaders, args.quick, 1800.0, _progress)
        rows += part
        print(render(part), flush=True)
    targets = [r for r in rows if "target" in r.note and "reference" in r.name]
    if targets:
        print("\n== the issue's targets (reference) ==", flush=True)
        for row in targets:
            value = "n/a" if row.value is None else f"{row.value:,.3g} {row.unit}"
            print(f"{_verdict(row):<7} {value:>10}  {row.name}", flush=True)
    meta["loadavg_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    if args.json:
        args.json.write_text(to_json(rows, meta) + "\n")
    if args.out:
        written = results.write(args.out, rows, meta, works, summary, spec_points)
        print(f"\nwrote {', '.join(str(p) for p in written)}", flush=True)
    return 0


def _verdict(row: Row) -> str:
    """``met`` / ``MISSED`` from a row's "target ...: met|missed" note."""
    found = re.search(r"target [^:;]*: (met|missed)", row.note)
    return "met" if found and found.group(1) == "met" else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
