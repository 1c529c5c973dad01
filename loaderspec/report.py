"""`loaderspec report`: run the conformance suite once per loader and write the outcome matrix.

Each loader runs in its own ``pytest --pyargs conformance`` subprocess (bounded; on timeout it and
its descendants are killed by pid), which writes ``OUT/<loader>/report.json``, ``report.md`` and
``report.html``; this module then writes ``OUT/matrix.json``, ``matrix.md`` and ``matrix.html``
(rendered by ``conformance.harness.report``, as the per-loader reports are) and prints the
Markdown matrix.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

DEFAULT_LOADERS = ("reference:DataLoader", "torch.utils.data:DataLoader")
# Adapters, listed when the package they adapt is importable: (loader, package).
OPTIONAL_LOADERS = (
    ("conformance.adapters.torchdata:Loader", "torchdata"),
    ("conformance.adapters.torchdata_nodes:ThreadLoader", "torchdata"),
    ("conformance.adapters.torchdata_nodes:ProcessLoader", "torchdata"),
    ("conformance.adapters.spdl:Loader", "spdl"),
    ("conformance.adapters.grain:Loader", "grain"),
    ("conformance.adapters.paddle:Loader", "paddle"),
)
RUN_TIMEOUT_S = 900.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loader",
        action="append",
        metavar="PKG.MOD:CLASS",
        help="a loader to check (repeatable); default: the reference loader, torch's, and the "
        "adapters (torchdata, torchdata.nodes, SPDL, grain, paddle) where those packages are "
        "installed",
    )
    parser.add_argument("--out", type=Path, default=Path("loaderspec-report"), help="output dir")
    parser.add_argument("--quick", action="store_true", help="only the cases marked quick")
    parser.add_argument(
        "--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds allowed per loader"
    )


def default_loaders() -> list[str]:
    found = list(DEFAULT_LOADERS)
    for loader, package in OPTIONAL_LOADERS:
        if importlib.util.find_spec(package) is not None:
            found.append(loader)
    return found


def slug(loader: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", loader).strip("_")


def run_one(loader: str, out: Path, quick: bool, timeout_s: float) -> dict[str, Any] | None:
    """Run the suite against ``loader`` into ``out``; its results, or None if it produced none."""
    from faultinject import processes  # imports psutil: only when a report is made

    cmd = [sys.executable, "-m", "pytest", "--pyargs", "conformance", f"--loader={loader}"]
    cmd += [f"--conformance-report={out}", "-q", "-p", "no:cacheprovider"]
    if quick:
        cmd += ["-m", "quick"]
    print(f"loaderspec report: {loader} ...", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.kill_tree(proc.pid)
        output, _ = proc.communicate()
        print(f"  timed out after {timeout_s:g} s; killed", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pytest-output.txt").write_text(output)
    path = out / "report.json"
    if not path.exists():
        print(f"  no results ({output.strip().splitlines()[-1:]})", flush=True)
        return None
    return json.loads(path.read_text())


def run(args: argparse.Namespace) -> int:
    """Run every loader, write the matrix, print it; 1 if some loader produced no results."""
    from conformance.harness.report import write_matrix

    loaders = args.loader or default_loaders()
    results = {x: run_one(x, args.out / slug(x), args.quick, args.timeout) for x in loaders}
    print(write_matrix(args.out, results))
    missing = [x for x, r in results.items() if r is None]
    if missing:
        print(f"loaderspec report: no results for {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0
