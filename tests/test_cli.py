"""The ``loaderspec`` command parses, dispatches and reports usage errors cleanly."""

import subprocess
import sys

import pytest

from loaderspec.cli import SUBCOMMANDS, build_parser


def test_every_subcommand_has_help():
    parser = build_parser()
    for name in SUBCOMMANDS:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--help"])
        assert exc.value.code == 0


def test_unknown_subcommand_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "loaderspec", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "invalid choice: 'frobnicate'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_is_a_users_help_not_a_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out
    assert "implemented in its own module" not in out
    assert "examples:" in out
    assert "--conformance-loader=" in out
