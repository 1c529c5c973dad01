"""Run the conformance suite in a pytest subprocess and read its report.json back.

Every run is bounded; on timeout the subprocess and its descendants are killed by pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from faultinject import processes

ROOT = Path(__file__).resolve().parents[2]
BROKEN_PATH = Path(__file__).resolve().parent  # `broken` is importable from here


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BROKEN_PATH), str(ROOT), out.get("PYTHONPATH", "")) if p
    )
    out.pop("LOADERSPEC_LOADER", None)
    return out


def run_suite(
    selectors: list[str],
    loader: str | None,
    report: Path,
    timeout_s: float,
    *extra: str,
    extra_env: dict[str, str] | None = None,
) -> tuple[int, str, dict[str, Any] | None]:
    """pytest the given case selectors against ``loader``; (exit code, output, results)."""
    cmd = [sys.executable, "-m", "pytest", *selectors, "-p", "no:cacheprovider", "-q"]
    if loader:
        cmd.append(f"--loader={loader}")
    cmd += [f"--conformance-report={report}", *extra]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
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
