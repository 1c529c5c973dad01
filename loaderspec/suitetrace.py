"""``--conformance-trace DIR``: trace every case of a conformance run, then check every traced
run against the spec.

Owns where a case's traces go (``DIR/<case id>/``: one folder per case, every loader the case
starts writing into it, its sandbox children and workers included) and the end-of-run check:
every run of every case is validated by TLC with ``loaderspec.tracecheck.check_runs``, which
batches runs that share the spec's constants into one TLC call each (the trace tests'
mechanism), ``default_jobs()`` calls at a time. Only a loader that writes trace records (the
reference loader) leaves runs to check; a case folder with none is skipped. The summary goes to
``DIR/traces.json`` and the terminal; a rejected or unreadable trace fails the session like a
failed case. ``loaderspec.pytest_plugin`` registers it (it is a tool of loaderspec's, which the
suite's packages do not import).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from loaderspec import tracecheck, tracewriter
from loaderspec.traces import TraceFormatError
from loaderspec.vocabulary import TRACE_GLOB

PLUGIN = "loaderspec_suite_trace"
RESULT_FILE = "traces.json"


def case_dir(root: Path, case_id: str) -> Path:
    """The folder a case's traces go to (its id, made a safe file name)."""
    return root / re.sub(r"[^A-Za-z0-9_.-]+", "_", case_id)


def validate(root: Path) -> dict[str, Any]:
    """Check every traced run under ``root``; write ``traces.json`` there and return it.

    A case folder whose logs cannot be read counts against the run (with the reason): the
    loader wrote a trace that proves nothing.
    """
    started = time.monotonic()
    runs: list[tracecheck.IteratorTrace] = []
    unreadable: list[dict[str, str]] = []
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []
    for folder in folders:
        if not any(f.stat().st_size for f in folder.glob(TRACE_GLOB)):
            continue  # nothing traced (another loader; or only an opened, empty file)
        try:
            found = tracecheck.runs_of([folder])
            for run in found:
                tracecheck.checkable_constants(run)
        except TraceFormatError as exc:
            unreadable.append({"case": folder.name, "why": str(exc)})
            continue
        runs.extend(found)
    verdicts = tracecheck.check_runs(runs, jobs=tracecheck.default_jobs()) if runs else []

    def case_of(verdict: tracecheck.RunVerdict) -> str:
        return Path(verdict.run.name.split("#")[0]).name

    summary = {
        "runs": len(verdicts),
        "accepted": sum(v.ok for v in verdicts),
        "cases": len({case_of(v) for v in verdicts}),
        "seconds": round(time.monotonic() - started, 1),
        "rejected": [{"case": case_of(v), "why": v.explain()} for v in verdicts if not v.ok],
        "unreadable": unreadable,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / RESULT_FILE).write_text(json.dumps(summary, indent=1))
    return summary


class SuiteTracing:
    """The pytest plugin of one traced conformance run (on an xdist worker it only traces)."""

    def __init__(self, config: pytest.Config, root: Path) -> None:
        self.root = root
        self.controller = not hasattr(config, "workerinput")
        self.summary: dict[str, Any] | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        from loaderspec.conformance import ids  # the suite's, active in a conformance run

        with tracewriter.trace_to(case_dir(self.root, ids.of_item(item))):
            return (yield)

    @pytest.hookimpl(trylast=True)  # after the conformance run has set its exit status
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.controller:
            return
        self.summary = validate(self.root)
        bad = self.summary["rejected"] or self.summary["unreadable"]
        if bad and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        s = self.summary
        if s is None:
            return
        terminalreporter.line(
            f"traces: {s['accepted']}/{s['runs']} runs of {s['cases']} cases are behaviours of"
            f" the spec ({s['seconds']} s of trace-check; {self.root / RESULT_FILE})",
            bold=True,
        )
        for bad in s["rejected"] + s["unreadable"]:
            terminalreporter.line("  " + bad["why"].splitlines()[0])


def start(config: pytest.Config) -> None:
    """Register the plugin when the run asked for ``--conformance-trace``."""
    root = config.getoption("loaderspec_trace", None)
    if root:
        config.pluginmanager.register(SuiteTracing(config, Path(root)), PLUGIN)
