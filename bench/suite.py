"""The conformance suite's wall time per loader: `pytest conformance --loader=X`, timed.

Each loader's suite runs in its own pytest process (the plugin's `--loader`), one after the
other; its outcome counts are read from pytest's summary line. Minutes per loader, so this
section runs only when asked (`--only suite`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.loaders import LOADERS
from bench.rows import Row
from faultinject import processes

SECTION = "suite"
ROOT = Path(__file__).resolve().parents[1]
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|error|errors|xfailed)")


def rows(
    names: dict[str, str | None], timeout_s: float, progress: Callable[[str], None]
) -> list[Row]:
    """One row per loader: the suite's wall time, with its outcome counts in the note."""
    out = []
    for i, (loader, missing) in enumerate(names.items(), 1):
        name = f"conformance suite wall time ({loader})"
        if missing:
            out.append(Row(SECTION, name, None, "s", f"n/a: {missing}"))
            continue
        progress(f"suite [{i}/{len(names)}] pytest conformance --loader={LOADERS[loader]}")
        cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider"]
        started = time.monotonic()
        proc = subprocess.Popen(
            [*cmd, f"--loader={LOADERS[loader]}"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            text, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            processes.kill_tree(proc.pid)
            proc.communicate()
            out.append(Row(SECTION, name, None, "s", f"> {timeout_s:g} s: killed by the bench"))
            continue
        took = time.monotonic() - started
        summary = [ln for ln in text.splitlines() if _COUNTS.search(ln)][-1:]
        counts = ", ".join(f"{n} {w}" for n, w in _COUNTS.findall(summary[0])) if summary else ""
        out.append(Row(SECTION, name, took, "s", counts or f"exit {proc.returncode}"))
    return out
