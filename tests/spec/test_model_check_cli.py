"""``loaderspec model-check``: exit codes, the readable counterexample, the jar override, and
TLC's distributed mode (a TLCServer and one TLCWorker on localhost)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from loaderspec import modelcheck, tlc

PREFETCH = ("--model", "BrokenPrefetchBound")  # 8 states to the smallest violation


def _model_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loaderspec", "model-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_broken_variant_exits_1_and_prints_the_counterexample():
    proc = _model_check(*PREFETCH)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = "ok   BrokenPrefetchBound: violates PrefetchBound (expected PrefetchBound)"
    assert summary in proc.stdout
    assert "counterexample (PrefetchBound):" in proc.stdout
    steps = [line for line in proc.stdout.splitlines() if "MainTryPutIndex:" in line]
    # One line per step: the action, then what it changed, old -> new.
    assert len(steps) >= 3
    assert "send_idx: 0 -> 1" in steps[0]
    assert 'index_queues[0]: append [kind |-> "task", idx |-> 0' in steps[0]


def test_unexpected_violation_exits_1_marked_fail():
    proc = _model_check(*PREFETCH, "--expect", "pass")
    assert proc.returncode == 1
    assert "FAIL BrokenPrefetchBound: violates PrefetchBound (expected pass)" in proc.stdout
    assert "counterexample (PrefetchBound):" in proc.stdout


def test_a_cfg_outside_the_manifest_is_expected_to_pass(tmp_path: Path):
    model = next(m for m in modelcheck.load_manifest() if m.name == "MCQuickPersistent")
    text = model.cfg.read_text().replace("NumTasks = 3", "NumTasks = 1")
    assert text != model.cfg.read_text()
    own = tmp_path / "MCMine.cfg"
    own.write_text(text)
    proc = _model_check("--config", str(own))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok   MCMine: pass (expected pass)" in proc.stdout


def test_usage_errors_exit_2_without_a_traceback(tmp_path: Path):
    proc = _model_check("--config", str(tmp_path / "nope.cfg"))
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    proc = _model_check("--model", "BrokenNope")
    assert proc.returncode == 2
    assert "no such model in the manifest; one of MCQuickMap" in proc.stderr
    proc = _model_check(*PREFETCH, env={tlc.JAR_ENV: str(tmp_path / "x.jar")})
    assert proc.returncode == 2
    assert "TLA2TOOLS_JAR" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_distributed_mode_finds_what_a_single_tlc_finds():
    # A safety-only model: TLC 2.15's TLCServer takes no -lncheck (nor checks liveness).
    model = next(m for m in modelcheck.load_manifest() if m.name == "MCQuickUnordered")
    assert not model.properties
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    outcome = modelcheck.check_model(model, timeout_s=240, distributed=1)
    assert outcome.found == "pass", outcome.result.output[-3000:]
    assert outcome.result.distinct == model.states
    assert "Registration for worker" in outcome.result.output
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert left == [], f"TLCServer/TLCWorker processes left behind: {left}"


@pytest.mark.parametrize("trace_kind", ["lasso", "stuttering"])
def test_counterexample_marks_the_end_of_a_liveness_trace(trace_kind: str):
    end = (
        tlc.TraceState(3, None, back_to=1)
        if trace_kind == "lasso"
        else tlc.TraceState(3, None, stuttering=True)
    )
    trace = [
        tlc.TraceState(1, None, {"x": "0", "q": "<<>>"}),
        tlc.TraceState(2, "WorkerPut", {"x": "0", "q": "<<1>>"}),
        end,
    ]
    text = modelcheck.format_counterexample(trace)
    lines = text.splitlines()
    assert lines[0].split() == ["1", "Init"]
    assert lines[3].split(None, 1) == ["2", "WorkerPut: q: append 1"]
    assert ("back to state 1" in lines[4]) == (trace_kind == "lasso")
    assert ("stuttering" in lines[4]) == (trace_kind == "stuttering")


def test_record_rewrites_only_the_figures_of_the_models_run(tmp_path: Path):
    manifest = tmp_path / "models.toml"
    manifest.write_text(
        "# a comment that stays\n[A]\ntier = 'quick'\nexpect = 'pass'\n"
        "states = 1\nseconds = 9.9\n\n# B's comment\n[B]\ntier = 'broken'\n"
        "violates = ['TypeOK']\nstates = 7\n"
    )
    result = dataclasses.replace(tlc.TlcResult(True, None, [], 20, 12, 3.21, "", 0, 1.5), depth=6)
    modelcheck.record_figures({"A": result}, manifest, seconds={"A": 3.21})
    text = manifest.read_text()
    assert text.startswith("# a comment that stays\n")
    assert "cpu_seconds = 1.5\n\n# B's comment\n[B]" in text  # A's figures stay in A
    a, b = modelcheck.load_manifest(manifest, out=tmp_path)
    assert (a.states, a.total_states, a.depth, a.seconds, a.cpu_seconds) == (12, 20, 6, 3.2, 1.5)
    assert (b.states, b.seconds, b.cpu_seconds, b.violates) == (7, None, None, {"TypeOK"})


def test_a_manifest_table_needs_pass_or_its_violations(tmp_path: Path):
    manifest = tmp_path / "models.toml"
    manifest.write_text("[A]\ntier = 'broken'\n")
    with pytest.raises(ValueError, match="expect = 'pass' or violates"):
        modelcheck.load_manifest(manifest, out=tmp_path)


def test_variants_states_the_models_of_each_tier_that_hold_a_variants_shape():
    proc = _model_check("--variants")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split(" | ")[0].strip("| "): line for line in proc.stdout.splitlines()}
    assert "MCQuickIterablePin" in rows["LostShardEnd"]  # an IterableDataset through the pin
    assert "MCQuickIterablePersistent" in rows["IterableSkipsNextEpoch"]
