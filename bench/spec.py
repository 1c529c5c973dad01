"""Spec figures: TLC's distinct states and seconds per model as workers, prefetch factor and
batches grow.

Each point is the quick map model (`[MCQuickMap]` of `spec/models.toml`: in order, pin thread, no
faults) with one constant changed (`NumWorkers`, `PrefetchFactor`, `NumTasks`), checked by the
project's TLC runner (`loaderspec.tlc.run_tlc`, the 2020 jar) with one TLC worker; a model that
outlives its bound is a row "> N s". Wall time follows the machine's load; TLC's CPU seconds do not.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.rows import Row, na
from loaderspec import modelcheck, tlc

SECTION = "spec"
BASE_MODEL = "MCQuickMap"


def sweeps(quick: bool) -> dict[str, list[int]]:
    """constant -> the values it takes (the others keep the base model's)."""
    if quick:
        return {"NumWorkers": [1]}  # one small model: the smoke run checks the path
    return {"NumWorkers": [1, 2, 3], "PrefetchFactor": [1, 2, 3], "NumTasks": [2, 3, 4, 5]}


def _variant(text: str, constant: str, value: int) -> str:
    out, count = re.subn(rf"(?m)^(\s*{constant}\s*=\s*)\S+", rf"\g<1>{value}", text)
    if count != 1:
        raise ValueError(f"{constant} is not set once in the base model")
    return out


def measure(quick: bool, timeout_s: float, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every point of every sweep: constant, value, states, seconds, CPU seconds, outcome."""
    base = next(m for m in modelcheck.load_manifest() if m.name == BASE_MODEL)
    text = base.cfg.read_text()
    points = [(c, v) for c, values in sweeps(quick).items() for v in values]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="loaderspec-bench-spec-") as tmp:
        for i, (constant, value) in enumerate(points, 1):
            progress(f"spec [{i}/{len(points)}] {BASE_MODEL} with {constant} = {value}")
            cfg = Path(tmp) / f"{BASE_MODEL}_{constant}{value}.cfg"
            point: dict[str, Any] = {"constant": constant, "value": value}
            try:
                cfg.write_text(_variant(text, constant, value))
                result = tlc.run_tlc(
                    base.spec,
                    cfg,
                    extra_args=base.args,
                    timeout_s=timeout_s,
                    jvm_args=tlc.FAST_START,
                )
            except Exception as exc:  # no java, no jar: a reason, not a crash
                point["error"] = na(exc)
                out.append(point)
                continue
            point.update(
                states=result.distinct,
                seconds=result.seconds,
                cpu_seconds=result.cpu_seconds,
                found=modelcheck.found_name(result),
            )
            out.append(point)
    return out


def rows(points: list[dict[str, Any]], timeout_s: float) -> list[Row]:
    """One row per point: distinct states, with seconds and TLC's verdict in the note."""
    out = []
    for p in points:
        name = f"{BASE_MODEL}, {p['constant']} = {p['value']}: distinct states"
        if "error" in p:
            out.append(Row(SECTION, name, None, "states", p["error"]))
        elif p["found"] == "Timeout":
            out.append(Row(SECTION, name, None, "states", f"> {timeout_s:g} s: TLC timed out"))
        else:
            cpu = "" if p["cpu_seconds"] is None else f", {p['cpu_seconds']:.1f} s of TLC CPU"
            note = f"{p['seconds']:.1f} s wall{cpu}; TLC: {p['found']}"
            out.append(Row(SECTION, name, p["states"], "states", note))
    return out
