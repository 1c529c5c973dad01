"""``python -m bench [--quick] [--json FILE]``: reference.DataLoader beside torch, in one run.

Prints the transport cost per batch; throughput for the issue's workloads (batches/s and CPU per
batch) with the ratios to torch and the issue's targets; and the fault figures with their ratios:
worker-death report latency and what later ``next()`` calls do, orphan exit after the parent's
SIGKILL (idle, busy in ``__getitem__``, blocked on a full pipe), shutdown with a stuck worker.
A loader that cannot be imported, or a figure that cannot be measured, is a row
"n/a: <reason>"; a wait that reached its deadline is a row "> N s"; the run itself does not fail
for either. Timings on a shared machine are noisy: the header records the machine and its load
average. See docs/bench.md."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
from pathlib import Path

import torch

from bench import faults, throughput, transport
from bench.loaders import LOADERS, unavailable_reason
from bench.rows import Row, render, to_json

SECTIONS = ("transport", "throughput", "faults")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only this section (repeatable)"
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
    parser.add_argument("--repeats", type=int, metavar="N", help="throughput repeats per loader")
    return parser.parse_args(argv)


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


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections; print the table; write JSON if asked."""
    args = _parse(argv)
    sections = args.only or list(SECTIONS)
    names = args.loader or list(LOADERS)
    loaders = {name: unavailable_reason(name) for name in names}
    deadline = args.deadline if args.deadline is not None else (6.0 if args.quick else 10.0)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    meta = {
        **machine(),
        "mode": "quick" if args.quick else "full",
        "deadline_s": deadline,
        "loaders": {name: reason or "available" for name, reason in loaders.items()},
    }
    print(
        f"bench ({meta['mode']}): {meta['platform']}, {meta['cpus']} CPUs, "
        f"load {meta['loadavg_at_start']}, torch {meta['torch']}",
        flush=True,
    )
    rows: list[Row] = []
    if "transport" in sections:
        rows += transport.rows(args.quick)
        print(render(r for r in rows if r.section == "transport"), flush=True)
    if "throughput" in sections:
        part = throughput.rows(loaders, args.quick, repeats, deadline_s=300.0)
        rows += part
        print(render(part), flush=True)
    if "faults" in sections:
        part = faults.rows(loaders, args.quick, deadline)
        rows += part
        print(render(part), flush=True)
    targets = [r for r in rows if "target" in r.note and "reference" in r.name]
    if targets:
        print("\n== the issue's targets (reference) ==", flush=True)
        for row in targets:
            value = "n/a" if row.value is None else f"{row.value:,.3g} {row.unit}"
            print(f"{_verdict(row):<7} {value:>10}  {row.name}", flush=True)
    if args.json:
        meta["loadavg_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
        args.json.write_text(to_json(rows, meta) + "\n")
    return 0


def _verdict(row: Row) -> str:
    """``met`` / ``MISSED`` from a row's "target ...: met|missed" note."""
    found = re.search(r"target [^:;]*: (met|missed)", row.note)
    return "met" if found and found.group(1) == "met" else "MISSED"


if __name__ == "__main__":
    sys.exit(main())
