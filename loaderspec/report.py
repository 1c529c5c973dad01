"""`loaderspec report`: run the conformance suite once per loader and write the outcome matrix.

Each loader runs in its own ``pytest --pyargs conformance`` subprocess (bounded; on timeout it and
its descendants are killed by pid), which writes ``OUT/<loader>/report.json``, ``report.md`` and
``report.html``; this module then writes ``OUT/matrix.json``, ``matrix.md`` and ``matrix.html``
and prints the Markdown matrix.
"""

from __future__ import annotations

import argparse
import html
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
SHORT = {"PASS": "PASS", "FAIL": "FAIL", "NON-STRICT": "NON-STRICT", "SKIP": "SKIP"}
_COLORS = {"PASS": "#c8e6c9", "FAIL": "#ffcdd2", "NON-STRICT": "#fff9c4", "SKIP": "#e0e0e0"}


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


def _cell(case: dict[str, Any] | None) -> str:
    if case is None:
        return "-"
    figures = ", ".join(f"{f['name']} {f['value']:g} {f['unit']}" for f in case["figures"])
    return case["outcome"] + (f" ({figures})" if figures else "")


def matrix(results: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """{loaders, cases: [{nodeid, case, properties, level, by_loader: {loader: case|None}}]}."""
    rows: dict[str, dict[str, Any]] = {}
    for loader, res in results.items():
        for case in (res or {}).get("cases", []):
            row = rows.setdefault(
                case["nodeid"],
                {k: case[k] for k in ("nodeid", "case", "properties", "level")} | {"by_loader": {}},
            )
            row["by_loader"][loader] = case
    loaders = list(results)
    for row in rows.values():
        for loader in loaders:
            row["by_loader"].setdefault(loader, None)
    # A run stopped from outside (past --timeout) keeps the cases it finished; "-" marks the rest.
    incomplete = [x for x, res in results.items() if res is None or not res.get("complete", True)]
    return {
        "loaders": loaders,
        "incomplete": incomplete,
        "cases": sorted(rows.values(), key=lambda r: r["nodeid"]),
    }


def to_markdown(m: dict[str, Any]) -> str:
    loaders = m["loaders"]
    lines = [
        "# Conformance matrix",
        "",
        *(
            [
                "Incomplete runs (stopped at the time limit, or did not start: see their"
                " pytest-output.txt; `-`: not run): "
                + ", ".join(f"`{x}`" for x in m.get("incomplete", [])),
                "",
            ]
            if m.get("incomplete")
            else []
        ),
        "| case | properties | level | " + " | ".join(f"`{x}`" for x in loaders) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in loaders) + " |",
    ]
    totals = {x: dict.fromkeys(SHORT, 0) for x in loaders}
    for row in m["cases"]:
        cells = []
        for x in loaders:
            case = row["by_loader"][x]
            cells.append(_cell(case))
            if case is not None:
                totals[x][case["outcome"]] += 1
        file = row["nodeid"].split("::")[0].rsplit("/", 1)[-1]
        lines.append(
            f"| `{file}::{row['case']}` | {', '.join(row['properties'])} | {row['level']} | "
            + " | ".join(cells)
            + " |"
        )
    lines += ["", "| totals | " + " | ".join(f"`{x}`" for x in loaders) + " |"]
    lines.append("| --- | " + " | ".join("---" for _ in loaders) + " |")
    for outcome in SHORT:
        lines.append(
            f"| {outcome} | " + " | ".join(str(totals[x][outcome]) for x in loaders) + " |"
        )
    return "\n".join(lines) + "\n"


def to_html(m: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(x)}</th>" for x in m["loaders"])
    rows = []
    for row in m["cases"]:
        cells = []
        for x in m["loaders"]:
            case = row["by_loader"][x]
            color = _COLORS.get(case["outcome"], "#fff") if case else "#fff"
            title = html.escape(case["detail"]) if case else ""
            cells.append(
                f'<td style="background:{color}" title="{title}">{html.escape(_cell(case))}</td>'
            )
        rows.append(
            f"<tr><td><code>{html.escape(row['case'])}</code></td>"
            f"<td>{html.escape(', '.join(row['properties']))}</td><td>{row['level']}</td>"
            + "".join(cells)
            + "</tr>"
        )
    return (
        "<!doctype html><meta charset=utf-8><title>Conformance matrix</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:3px 6px}"
        "table{border-collapse:collapse}</style><h1>Conformance matrix</h1>"
        f"<table><tr><th>case</th><th>properties</th><th>level</th>{head}</tr>"
        + "".join(rows)
        + "</table>\n"
    )


def write_matrix(out: Path, results: dict[str, dict[str, Any] | None]) -> str:
    m = matrix(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(m, indent=1) + "\n")
    md = to_markdown(m)
    (out / "matrix.md").write_text(md)
    (out / "matrix.html").write_text(to_html(m))
    return md


def run(args: argparse.Namespace) -> int:
    """Run every loader, write the matrix, print it; 1 if some loader produced no results."""
    loaders = args.loader or default_loaders()
    results = {x: run_one(x, args.out / slug(x), args.quick, args.timeout) for x in loaders}
    print(write_matrix(args.out, results))
    missing = [x for x, r in results.items() if r is None]
    if missing:
        print(f"loaderspec report: no results for {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0
