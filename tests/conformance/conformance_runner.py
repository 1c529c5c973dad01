"""Run the conformance suite in a pytest subprocess and read its report.json back.

Every run is bounded; on timeout the subprocess and its descendants are killed by pid.
`whole_suite` is a faultinject sandbox target: the suite run inside a sandbox child that is a
subreaper, so whatever the run leaves (even in sessions of its own) is the sandbox's to report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from loaderspec.faultinject import processes, sandbox
from loaderspec.faultinject.sandbox import SandboxReport

ROOT = Path(__file__).resolve().parents[2]
BROKEN_PATH = Path(__file__).resolve().parent  # `broken` is importable from here


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BROKEN_PATH), str(ROOT), out.get("PYTHONPATH", "")) if p
    )
    out.pop("LOADERSPEC_LOADER", None)
    # The outer test's name is not the inner run's: broken.dispatch reads PYTEST_CURRENT_TEST to
    # know whether a case is running (the plugin builds the loader once before any case).
    out.pop("PYTEST_CURRENT_TEST", None)
    return out


def run_suite(
    selectors: list[str],
    loader: str | None,
    report: Path,
    timeout_s: float,
    *extra: str,
    extra_env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> tuple[int, str, dict[str, Any] | None]:
    """pytest the given case selectors against ``loader`` (from ``cwd``); (exit code, output,
    results)."""
    cmd = [sys.executable, "-m", "pytest", *selectors, "-p", "no:cacheprovider", "-q"]
    if loader:
        cmd.append(f"--loader={loader}")
    cmd += [f"--conformance-report={report}", *extra]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env={**env(), **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        processes.kill_tree(proc.pid)
        out, _ = proc.communicate()
        return -9, out, None
    path = report / "report.json"
    return proc.returncode, out, json.loads(path.read_text()) if path.exists() else None


def outcomes(results: dict[str, Any]) -> dict[str, str]:
    return {c["nodeid"]: c["outcome"] for c in results["cases"]}


def whole_suite(report: str, timeout_s: float) -> dict[str, Any]:
    """The sandbox target: pytest the whole suite against the default loader (the reference),
    every case traced and every trace checked against the spec (``REPORT/traces/traces.json``);
    its exit status and the tail of its output."""
    cmd = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q"]
    cmd += ["--conformance-report", report, "--conformance-trace", str(Path(report) / "traces")]
    done = subprocess.run(
        cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout_s
    )
    return {"rc": done.returncode, "tail": done.stdout[-3000:] + done.stderr[-2000:]}


def run_whole_suite(report: Path, timeout_s: float) -> SandboxReport:
    """`whole_suite` in a sandbox whose child is a subreaper: the report's `lingering`,
    `zombies` and `leaked_shm` (attributed by pid) are what the whole run left behind."""
    return sandbox.run(
        whole_suite,
        str(report),
        timeout_s,
        deadline_s=timeout_s + 60,
        subreaper=True,
        linger_s=2.0,
    )
