"""`loaderspec model-check --config`: what stops TLC before it checks anything is one line naming
the problem and the fix (exit 2), not a violation with "None distinct states"; the README's
broken-variant example works from any directory (the spec and its manifest ship inside
loaderspec)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loaderspec import tlc
from loaderspec.modelcheck import load_manifest, spec_dir

CFG_ERROR = """Error: TLC threw an unexpected exception.
The exception was a tlc2.tool.ConfigFileException
: TLC found an error in the configuration file at line 3
It was expecting = or <-, but did not find it.
"""
UNDEFINED = (
    "Error: The configuration file substitutes for PrefetchRoom with the undefined identifier "
    "BrokenPrefetchRoom.\n"
)


def test_a_cfg_syntax_error_names_its_line() -> None:
    line = tlc.problem(CFG_ERROR, Path("bad.cfg"))
    assert line == (
        "the .cfg file (bad.cfg) has a syntax error at line 3: It was expecting = or <-, but did "
        "not find it; fix that line (e.g. CONSTANT Name = value)"
    )


def test_a_copied_broken_variant_is_told_which_module_to_pass() -> None:
    line = tlc.problem(UNDEFINED, Path("BrokenPrefetchBound.cfg"), spec_dir())
    assert line is not None
    assert "names BrokenPrefetchRoom" in line
    assert f"pass --spec {spec_dir() / 'MCBroken.tla'}" in line


def test_a_run_that_checked_something_has_no_problem_line() -> None:
    assert tlc.problem("Model checking completed. No error has been found.\n") is None


def _model_check(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "loaderspec", "model-check", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("java") is None, reason="no java: TLC cannot run")
def test_the_command_exits_2_with_one_line(tmp_path: Path) -> None:
    """A broken variant's generated cfg copied away (its module not beside it), and a cfg with a
    syntax error."""
    variant = next(m for m in load_manifest() if m.name == "BrokenPrefetchBound")
    shutil.copy(variant.cfg, tmp_path)
    (tmp_path / "bad.cfg").write_text("SPECIFICATION Spec\nCONSTANT = 3\n")
    for cfg, says in (("BrokenPrefetchBound.cfg", "pass --spec"), ("bad.cfg", "syntax error")):
        done = _model_check("--config", cfg, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.count("loaderspec model-check: error:") == 1
        assert says in done.stderr
        assert "distinct states" not in done.stdout


def test_a_spec_path_outside_the_checkout_finds_the_shipped_spec(tmp_path: Path) -> None:
    done = _model_check("--config", "spec/broken/NoSuchVariant.cfg", cwd=tmp_path)
    assert done.returncode == 2
    assert f"no such file (the spec's own modules: {spec_dir()}" in done.stderr
    assert "--model NAME" in done.stderr


@pytest.mark.skipif(shutil.which("java") is None, reason="no java: TLC cannot run")
def test_the_readmes_broken_variant_example_runs_from_any_directory(tmp_path: Path) -> None:
    done = _model_check("--model", "BrokenPrefetchBound", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # TLC's verdict: a violation
    assert "violates PrefetchBound (expected PrefetchBound)" in done.stdout
