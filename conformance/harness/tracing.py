"""Trace every case of a conformance run and validate the traces together (``--conformance-trace``).

Owns where a case's traces go (one folder per case id, under the run's trace folder) and the
end-of-run validation: every run the loader traced, of every case, is checked by TLC against the
spec with ``loaderspec.tracecheck.check_runs``, which batches runs that share the spec's
constants into one TLC call each (the trace tests' mechanism). Only a loader that writes
trace records (the reference loader) leaves runs to check; a case folder with none is skipped.
The result is ``traces.json`` in the trace folder: how many runs, how many ACCEPTED, how long,
and each rejected run's explanation.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loaderspec import tracecheck, tracewriter
from loaderspec.traces import TraceFormatError
from loaderspec.vocabulary import TRACE_GLOB

RESULT_FILE = "traces.json"


def case_dir(root: Path, case_id: str) -> Path:
    """The folder a case's traces go to (its id, made a safe file name)."""
    return root / re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)


@contextlib.contextmanager
def traced(root: Path, case_id: str) -> Iterator[Path]:
    """Trace every loader the case starts (its sandbox children and their workers too)."""
    with tracewriter.trace_to(case_dir(root, case_id)) as directory:
        yield directory


def validate(root: Path) -> dict[str, Any]:
    """Check every traced run under ``root`` (batched TLC calls); write and return the summary.

    A case folder whose logs cannot be read is a rejection of that case (with the reason): the
    loader wrote a trace that proves nothing.
    """
    started = time.monotonic()
    runs: list[tracecheck.Run] = []
    unreadable: list[dict[str, str]] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []:
        if not any(folder.glob(TRACE_GLOB)):
            continue
        try:
            found = tracecheck.runs_of([folder])
            for run in found:
                tracecheck.checkable_constants(run)
        except TraceFormatError as exc:
            unreadable.append({"case": folder.name, "why": str(exc)})
            continue
        runs.extend(found)
    verdicts = tracecheck.check_runs(runs, jobs=tracecheck.default_jobs()) if runs else []
    rejected = [
        {"case": Path(v.run.name.split("#")[0]).name, "run": v.run.name, "why": v.explain()}
        for v in verdicts
        if not v.ok
    ]
    summary = {
        "runs": len(verdicts),
        "accepted": sum(v.ok for v in verdicts),
        "cases": len({Path(v.run.name.split("#")[0]).name for v in verdicts}),
        "seconds": round(time.monotonic() - started, 1),
        "rejected": rejected,
        "unreadable": unreadable,
    }
    (root / RESULT_FILE).write_text(json.dumps(summary, indent=1))
    return summary
