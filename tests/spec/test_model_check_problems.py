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


NOT_DEFINED = (
    "Error: The invariant NoSuchInvariant specified in the configuration file\n"
    "is not defined in the specification.\n"
)
NO_CONSTANT = (
    "Error: The constant parameter NumTasks is not assigned a value by the configuration file.\n"
)


def test_a_cfg_naming_an_undefined_invariant_names_it_and_its_line(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.cfg"
    cfg.write_text("SPECIFICATION Spec\nINVARIANTS\n    TypeOK NoSuchInvariant\n")
    line = tlc.problem(NOT_DEFINED, cfg)
    assert line is not None
    assert "names the invariant NoSuchInvariant at line 3" in line
    assert "fix the name" in line


def test_a_missing_constant_and_an_empty_cfg_say_what_to_add(tmp_path: Path) -> None:
    cfg = tmp_path / "mine.cfg"
    cfg.write_text("SPECIFICATION Spec\n")
    assert "CONSTANT NumTasks = <value>" in (tlc.problem(NO_CONSTANT, cfg) or "")
    cfg.write_text("\\* nothing but a comment\n")
    assert "is empty" in (tlc.problem(NO_CONSTANT, cfg) or "")


@pytest.mark.skipif(shutil.which("java") is None, reason="no java: TLC cannot run")
def test_a_cfg_tlc_cannot_use_is_a_usage_error_not_a_violation(tmp_path: Path) -> None:
    model = next(m for m in load_manifest() if m.tier == "quick" and not m.violates)
    text = model.cfg.read_text().replace("TypeOK", "TypeOK NoSuchInvariant", 1)
    (tmp_path / "mine.cfg").write_text(text)
    done = _model_check("--config", "mine.cfg", "--spec", str(model.spec), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("loaderspec model-check: error:") == 1
    assert "NoSuchInvariant at line" in done.stderr
    assert "None distinct states" not in done.stdout + done.stderr
    assert "TLCError" not in done.stdout


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--timeout", "-5"], "must be more than 0"),
        (["--timeout", "0"], "must be more than 0"),
        (["--timeout", "inf"], "at most 86400"),
        (["--timeout", "1e9"], "at most 86400"),
        (["--distributed", "-1"], "must be 0 or more"),
        (["--workers", "0"], "must be 1 or more"),
    ],
)
def test_bad_numbers_are_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    from loaderspec import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["model-check", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert says in err


def test_record_refuses_outside_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed wheel's spec (no pyproject.toml beside it): nothing runs, nothing is written."""
    from loaderspec import cli, modelcheck

    installed = tmp_path / "site-packages" / "loaderspec" / "spec"
    installed.mkdir(parents=True)
    monkeypatch.setattr(modelcheck, "spec_dir", lambda: installed)
    assert cli.main(["model-check", "--record"]) == 2
    assert "not a checkout" in capsys.readouterr().err


def test_an_interrupted_tlc_run_kills_its_jvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM, which the command turns into it) while TLC runs: the child goes."""
    import psutil

    started: list[subprocess.Popen[str]] = []

    class Interrupted(subprocess.Popen[str]):
        def communicate(self, *args: object, **kwargs: object) -> tuple[str, str]:
            started.append(self)
            raise KeyboardInterrupt

    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    monkeypatch.setattr(tlc, "java_command", lambda *a, **k: sleeper)
    monkeypatch.setattr(tlc, "tla2tools_jar", lambda: Path("unused.jar"))
    monkeypatch.setattr(tlc.subprocess, "Popen", Interrupted)
    model = next(m for m in load_manifest() if m.tier == "quick")
    with pytest.raises(KeyboardInterrupt):
        tlc.run_tlc(model.spec, model.cfg)
    assert started
    assert started[0].poll() is not None
    assert not psutil.pid_exists(started[0].pid)
