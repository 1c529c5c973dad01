"""The conformance suite's wall time per loader: `loaderspec report`'s run of the suite, timed.

Each loader's suite runs in its own pytest process through `loaderspec.report.run_one` (the one
way the project runs the suite for a loader: bounded, killed by pid on timeout), one loader after
the other; the outcome counts come from its report.json (`conformance.harness.report.counts`).
Minutes per loader, so this section runs only when asked (`--only suite`); with `--quick` it
runs the suite's quick selection (`-m quick`, as `loaderspec report --quick`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loaderspec.conformance.harness.report import counts

from bench.loaders import LOADERS
from bench.rows import Row
from loaderspec.report import run_one, slug

SECTION = "suite"


def rows(
    names: dict[str, str | None], quick: bool, timeout_s: float, progress: Callable[[str], None]
) -> list[Row]:
    """One row per loader: the suite's wall time, with its outcome counts in the note."""
    out = []
    with tempfile.TemporaryDirectory(prefix="loaderspec-bench-suite-") as tmp:
        for i, (loader, missing) in enumerate(names.items(), 1):
            name = f"conformance suite{' (quick)' if quick else ''} wall time ({loader})"
            if missing:
                out.append(Row(SECTION, name, None, "s", f"n/a: {missing}"))
                continue
            progress(f"suite [{i}/{len(names)}] pytest conformance --loader={LOADERS[loader]}")
            started = time.monotonic()
            results = run_one(LOADERS[loader], Path(tmp) / slug(loader), quick, timeout_s)
            took = time.monotonic() - started
            if results is None:
                out.append(Row(SECTION, name, None, "s", f"n/a: no report within {took:.0f} s"))
                continue
            found = ", ".join(f"{n} {k}" for k, n in counts(results["cases"]).items())
            out.append(Row(SECTION, name, took, "s", found))
    return out
