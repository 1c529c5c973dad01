"""`loaderspec report`: run the conformance suite once per loader and write the outcome matrix.

Each loader runs in its own ``pytest --pyargs loaderspec.conformance`` subprocess (bounded; on
timeout it and its descendants are killed by pid), which writes ``OUT/<loader>/report.json``,
``report.md`` and ``report.html`` (an earlier run's are removed first: a run that fails to
start shows no old results); this module then writes ``OUT/matrix.json``, ``matrix.md`` and
``matrix.html`` (``conformance.harness.matrix``) and prints the Markdown matrix. With
``--readme PAGE`` it also rewrites the loaders' totals table of that page between its markers
(``scripts/matrix.sh`` regenerates docs/reports and README.md's table so, from one run).

The exit status follows the suite's exit policy (``--fail-on``, as the plugin's
``--conformance-fail-on``): 1 when a loader's run failed its verdict (by default, a MUST failure)
or left no complete report, else 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from loaderspec import graded
from loaderspec.cliargs import positive_int, positive_seconds
from loaderspec.vocabulary import FAIL_ON, LOADER_OPTION

DEFAULT_LOADERS = tuple(g.loader for g in graded.DEFAULTS)
# Adapters, listed when the package they adapt is importable: (loader, package).
OPTIONAL_LOADERS = tuple((g.loader, g.package) for g in graded.ADAPTERS)
RUN_TIMEOUT_S = 900.0


REPORT_FILES = ("report.json", "report.md", "report.html", "pytest-output.txt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--loader",
        action="append",
        metavar="PKG.MOD:CLASS",
        help="a loader to check (repeatable); default: the reference loader, torch's, and the "
        f"adapters ({', '.join(g.name for g in graded.ADAPTERS)}) where those packages are "
        "installed",
    )
    parser.add_argument(
        "--out",
        type=out_dir,
        default=Path("loaderspec-report"),
        help="output directory (created; one folder per loader inside)",
    )
    parser.add_argument(
        "--python",
        action="append",
        type=python_for,
        default=[],
        metavar="PKG.MOD:CLASS=PYTHON",
        help="the Python that runs this loader's suite (repeatable; default: this one), for a "
        "loader installed in a virtualenv of its own, e.g. "
        "--python loaderspec.conformance.adapters.litdata:Loader=.venv-litdata/bin/python",
    )
    parser.add_argument("--quick", action="store_true", help="only the cases marked quick")
    parser.add_argument(
        "--full",
        action="append",
        default=[],
        metavar="PKG.MOD:CLASS",
        help="with --quick: this loader runs the whole suite all the same (repeatable), e.g. "
        "the reference and torch in full and the other loaders' quick selection",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=RUN_TIMEOUT_S,
        help="seconds allowed per loader (more than 0, at most a day: 86400)",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="run up to N loaders' suites at once, in the order given (default 1: one after "
        "another; the cases' time bounds assume a machine that is not oversubscribed)",
    )
    parser.add_argument(
        "--readme",
        type=Path,
        metavar="PAGE",
        help="also rewrite the loaders' totals table of this Markdown page (between its "
        "<!-- matrix:begin --> and <!-- matrix:end --> markers), e.g. --readme README.md",
    )
    parser.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default=FAIL_ON[0],
        help="exit 1 when a loader has a MUST failure (must, the default), also a NON-STRICT "
        "(should), or only when a run left no complete report (never)",
    )


def out_dir(text: str) -> Path:
    """``--out``: a directory, or a path where one can be made.

    Raises:
        argparse.ArgumentTypeError: ``text`` is an existing file (or lies under one), or the
            directory cannot be created (created otherwise).
    """
    path = Path(text)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(
                f"{text!r}: {p} is a file; give a directory (it is created), e.g. --out OUT"
            )
    try:
        # Made now: a path that cannot be a directory is refused before the runs, which are long.
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r}: cannot create that directory ({exc.strerror or exc}); give one that can"
            " be, e.g. --out OUT"
        ) from None
    return path


def python_for(text: str) -> tuple[str, str]:
    """``--python``: (loader, the Python that runs its suite).

    Raises:
        argparse.ArgumentTypeError: no ``=``, or nothing on one side of it.
    """
    loader, _, python = text.partition("=")
    if not loader or not python:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not LOADER=PYTHON, e.g. "
            "--python loaderspec.conformance.adapters.litdata:Loader=.venv-litdata/bin/python"
        )
    return loader, python


def default_loaders() -> list[str]:
    found = list(DEFAULT_LOADERS)
    for loader, package in OPTIONAL_LOADERS:
        if importlib.util.find_spec(package) is not None:
            found.append(loader)
    return found


def slug(loader: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", loader).strip("_")


def load_results(path: Path) -> dict[str, Any]:
    """A report.json; one written before case ids existed gets them (``conformance.ids``'
    aliases of its node ids) and the issues its cases guard against, so that old and new
    reports share the matrix's rows and notes."""
    from loaderspec.conformance import catalog, ids

    results = json.loads(path.read_text())
    for case in results.get("cases", []):
        if "id" not in case:
            nodeid = case["nodeid"]
            if nodeid in ids.aliases():
                case["id"] = ids.aliases()[nodeid]
            case["file"] = nodeid.split("::")[0]
        known = ids.suite().get(case.get("id", ""))
        if "guards" not in case and known is not None:
            case["guards"] = known.guards
            case["failure_modes"] = catalog.failure_modes(known.guards)
    return results


def run_one(
    loader: str,
    out: Path,
    quick: bool,
    timeout_s: float,
    fail_on: str = "must",
    python: str = sys.executable,
) -> dict[str, Any] | None:
    """Run the suite against ``loader`` into ``out`` with ``python`` (a virtualenv's, where the
    loader's dependencies clash with the others'); its results, or None if it produced none."""
    from loaderspec.faultinject import processes  # imports psutil: only when a report is made

    for name in REPORT_FILES:
        (out / name).unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "--pyargs", "loaderspec.conformance"]
    cmd += [f"{LOADER_OPTION}={loader}", f"--conformance-fail-on={fail_on}"]
    cmd += [f"--conformance-report={out}", "-q", "-p", "no:cacheprovider"]
    if quick:
        cmd += ["-m", "quick"]
    which = "the quick selection" if quick else "the whole suite"
    print(f"loaderspec report: {loader}, {which} ...", flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.kill_tree(proc.pid)
        output, _ = proc.communicate()
        print(f"  timed out after {timeout_s:g} s; killed", flush=True)
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C, SIGTERM): the suite's run goes too
            processes.kill_tree(proc.pid)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pytest-output.txt").write_text(output)
    path = out / "report.json"
    if not path.exists():
        print("  no report (why: below)", flush=True)
        return None
    return load_results(path)


def why_no_report(out: Path) -> str:
    """Why a loader's run left no complete report, from its pytest-output.txt: pytest's usage
    error (a loader that cannot be imported or built), else the output's last line."""
    path = out / "pytest-output.txt"
    lines = path.read_text().strip().splitlines() if path.exists() else []
    errors = [x.removeprefix("ERROR: ") for x in lines if x.startswith("ERROR: ")]
    return (errors or lines or ["no output"])[-1]


def failures(results: dict[str, dict[str, Any] | None], out: Path | None = None) -> list[str]:
    """One line per loader whose run fails the exit policy (its verdict), or left no complete
    report (with why, when ``out`` holds the runs' folders)."""
    lines = []
    for loader, res in results.items():
        if res is None or not res.get("complete") or "verdict" not in res:
            where = "its pytest-output.txt" if out is None else str(out / slug(loader))
            why = "" if out is None else f": {why_no_report(out / slug(loader))}"
            lines.append(f"{loader}: no complete report{why} (see {where})")
        elif res["verdict"]["failed"]:
            lines.append(f"{loader}: " + "; ".join(res["verdict"]["reasons"]))
    return lines


def run(args: argparse.Namespace) -> int:
    """Run every loader, write the matrix, print it; 1 if a loader fails the exit policy. A
    matrix with a run that left no complete report is written (it marks that run incomplete)
    but not printed: its counts would read as that loader's grades."""
    from loaderspec.conformance.harness import matrix

    if args.readme is not None:
        # Checked before the runs, which take long: a page without markers fails at once.
        try:
            matrix.with_totals(args.readme.read_text(), "")
        except (OSError, ValueError) as exc:
            print(f"loaderspec report: --readme {args.readme}: {exc}", file=sys.stderr)
            return 2
    loaders = args.loader or default_loaders()
    # Absent from a Namespace built by hand (before --python and --full existed).
    pythons = dict(getattr(args, "python", None) or [])
    full = list(getattr(args, "full", None) or [])
    if full and not args.quick:
        print(
            "loaderspec report: --full needs --quick (without it every loader runs in full)",
            file=sys.stderr,
        )
        return 2
    loaders += [x for x in full if x not in loaders]
    start = time.monotonic()

    def one(x: str) -> dict[str, Any] | None:
        quick = args.quick and x not in full
        python = pythons.get(x, sys.executable)
        return run_one(x, args.out / slug(x), quick, args.timeout, args.fail_on, python)

    # Each loader's suite is a subprocess of its own: threads only wait for them.
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = dict(zip(loaders, pool.map(one, loaders), strict=True))
    md = matrix.write_matrix(args.out, results)
    print(f"loaderspec report: {len(loaders)} loaders in {(time.monotonic() - start) / 60:.1f} min")
    if args.readme is not None:
        table = matrix.totals_table(matrix.matrix(results), results)
        args.readme.write_text(matrix.with_totals(args.readme.read_text(), table))
    failed = failures(results, args.out)
    if all(r is not None and r.get("complete") for r in results.values()):
        print(md)
    else:
        print(f"loaderspec report: no matrix printed: a run left no complete report ({args.out})")
    for line in failed:
        print(f"loaderspec report: {line}", file=sys.stderr)
    return 1 if failed else 0
