"""bench: the quick run prints every row; the pieces it is built from behave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench import faults
from bench.rows import Row, na, render

ROOT = Path(__file__).resolve().parents[2]
# torch beside the reference, so the ratio rows have both sides; torchdata (optional) is left
# out of the smoke run to keep it inside the CI budget: its rows are the same code.
LOADERS = ("torch", "reference")
FAULTS = (
    "worker death -> error",
    "later next() after the error",
    "orphan exit after parent SIGKILL, idle",
    "orphan exit after parent SIGKILL, busy in __getitem__",
    "orphan exit after parent SIGKILL, blocked on a full pipe",
    "shutdown (del it, loader) with a stuck worker",
)


def expected_rows(loaders: tuple[str, ...]) -> list[str]:
    """Every row the benchmark must print for ``loaders``, measured or not."""
    others = [name for name in loaders if name != "torch"]
    return (
        [
            f"transport {batch}: {method}"
            for batch in ("cheap 4x64 f32", "large 4x1MB f32")
            for method in ("reference", "reference-bytes", "torch", "pickle", "torch / reference")
        ]
        + [
            f"{workload}: {loader}"
            for workload in (
                "cheap items (64 floats, batch 4, 2 workers)",
                "costly items (1 ms CPU each, batch 4, 2 workers)",
                "1 MB items (batch 4, 2 workers)",
                "single-process baseline (cheap items, num_workers=0)",
            )
            for loader in loaders
        ]
        + [
            f"ratio {loader}/torch, {workload}"
            for workload in ("cheap", "costly", "1MB items", "single-process")
            for loader in others
        ]
        + [f"{fault} ({loader})" for fault in FAULTS for loader in loaders]
        + [f"ratio torch/{loader}, {fault}" for fault in FAULTS for loader in others]
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_run_prints_every_row(tmp_path):
    out = tmp_path / "bench.json"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    loader_args = [arg for name in LOADERS for arg in ("--loader", name)]
    command = [sys.executable, "-m", "bench", "--quick", "--deadline", "2", "--json", str(out)]
    proc = subprocess.run(
        [*command, *loader_args],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    names = [row["name"] for row in doc["rows"]]
    assert sorted(names) == sorted(expected_rows(LOADERS))
    for row in doc["rows"]:
        # A figure, or the reason there is none: never an empty row.
        assert row["value"] is not None or row["note"], row
        assert row["name"] in proc.stdout
    # The reference's figures exist (no timing asserted: speed is the bench's, not a test's;
    # the 2 s deadline is only a hang bound, 4x the 0.5 s targets, for loaded CI cores).
    by_name = {row["name"]: row for row in doc["rows"]}
    for name in (
        "cheap items (64 floats, batch 4, 2 workers): reference",
        "worker death -> error (reference)",
        "shutdown (del it, loader) with a stuck worker (reference)",
    ):
        assert by_name[name]["value"] is not None, by_name[name]
    assert doc["meta"]["mode"] == "quick"
    assert set(doc["meta"]["loaders"]) == set(LOADERS)
    # The bench cleans up by PID: nothing it started outlives it.
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_rows_render_values_and_reasons():
    rows = [
        Row("a", "x", 1234.5, "ms", "note"),
        Row("a", "yy", None, "s", "n/a: no loader"),
        Row("b", "z", 0.125, "x"),
    ]
    text = render(rows)
    assert "== a ==" in text
    assert "== b ==" in text
    assert "1,234 ms  (note)" in text or "1,235 ms  (note)" in text
    assert "n/a: no loader" in text
    assert "0.125 x" in text


def test_na_names_the_exception():
    assert na(ImportError("no module named torchdata\nmore")) == (
        "n/a: ImportError: no module named torchdata"
    )
    assert na("because") == "n/a: because"


def test_fault_ratio_is_a_lower_bound_when_torch_hit_the_deadline():
    mine = Row("faults", "x (reference)", 0.1, "s")
    hung = Row("faults", "x (torch)", None, "s", "> 10 s: ...", bound=10.0)
    row = faults.ratio("x", "s", mine, hung, "reference")
    assert row.value is None
    assert row.bound == pytest.approx(100.0)
    assert row.note.startswith("> 100 x")
    measured = Row("faults", "x (torch)", 5.0, "s")
    assert faults.ratio("x", "s", mine, measured, "reference").value == pytest.approx(50.0)
    missing = Row("faults", "x (reference)", None, "s", "n/a: broken")
    assert faults.ratio("x", "s", missing, measured, "reference").value is None


def test_targets_are_judged_for_the_reference_only():
    assert faults._target_note("reference", 0.03, 0.5, "s") == "target <= 0.5 s: met"
    assert faults._target_note("reference", 0.7, 0.5, "s") == "target <= 0.5 s: missed"
    assert faults._target_note("reference", None, 0.5, "s") == "target <= 0.5 s: missed"
    assert faults._target_note("torch", 0.7, 0.5, "s") == ""
