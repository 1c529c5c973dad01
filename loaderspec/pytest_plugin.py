"""pytest11 entry point of the conformance suite (``loaderspec = loaderspec.pytest_plugin``).

Loaded in every pytest session of an environment where loaderspec is installed, so it imports
nothing outside the ``loaderspec`` name and the standard library, and is silent unless the
session is a conformance run: one of the ``--conformance-*`` options (or ``--loader``) was given,
or a collected path lies inside the suite's ``conformance`` package, or ``--pyargs
loaderspec.conformance``. Only then does it hand the run to ``loaderspec.conformance.plugin``,
which imports the loader and grades the cases.

``--loader`` is a short spelling of ``--conformance-loader``, registered only after the initial
conftests were loaded and only when nothing else claimed it: a project whose own conftest defines
``--loader`` keeps it (and can still name a loader with ``--conformance-loader``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Generator
from pathlib import Path

import pytest

from loaderspec import suite
from loaderspec.vocabulary import DEFAULT_LOADER, FAIL_ON, LOADER_ENV, LOADER_INI
from loaderspec.vocabulary import LOADER_OPTION as OPTION
from loaderspec.vocabulary import LOADER_SHORT_OPTION as SHORT_OPTION

__all__ = ["is_conformance_run"]
MSG_NO_SUITE = (
    "the conformance suite needs loaderspec's suite extra ({error}): "
    "pip install 'loaderspec[suite]' (or the wheel with [suite])"
)
_DEST_OPTIONS = (
    "loaderspec_loader",
    "loaderspec_loader_short",
    "loaderspec_report",
    "loaderspec_expect",
    "loaderspec_fail_on",
    "loaderspec_repeat",
    "loaderspec_trace",
    "loaderspec_replay_draw",
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loaderspec", "loaderspec conformance suite")
    group.addoption(
        OPTION,
        dest="loaderspec_loader",
        default=None,
        metavar="PKG.MOD:CLASS",
        help=f"loader class under test (also {SHORT_OPTION} where no other plugin defines it; "
        f"env {LOADER_ENV}, ini {LOADER_INI}; default {DEFAULT_LOADER})",
    )
    group.addoption(
        "--conformance-report",
        dest="loaderspec_report",
        default=None,
        metavar="DIR",
        help="write report.json, report.md and report.html of the conformance run into DIR",
    )
    group.addoption(
        "--conformance-expect",
        dest="loaderspec_expect",
        default=None,
        metavar="FILE",
        help="expected outcomes (TOML or JSON: case id -> outcome and reason): a known FAIL "
        "does not fail the run, an unexpected pass is reported as fixed",
    )
    group.addoption(
        "--conformance-fail-on",
        dest="loaderspec_fail_on",
        default=None,
        choices=FAIL_ON,
        help="what fails the run: a MUST failure (must, the default), also a SHOULD shortfall "
        "(should: NON-STRICT), or no grade (never)",
    )
    group.addoption(
        "--conformance-repeat",
        dest="loaderspec_repeat",
        default=1,
        type=_positive,
        metavar="N",
        help="run each case N times and grade the worst run (a racy loader shows as racy)",
    )
    group.addoption(
        "--conformance-trace",
        dest="loaderspec_trace",
        default=None,
        metavar="DIR",
        help="trace every case's runs into DIR/<case id>/ and, when the run ends, check every"
        " traced run against the spec with TLC (the reference loader traces; DIR/traces.json)",
    )
    group.addoption(
        "--conformance-replay-draw",
        dest="loaderspec_replay_draw",
        default=None,
        metavar="DRAW",
        help="run only the drawn case that recorded DRAW (a FAIL's 'replay:' line, or its"
        ' "draw" in report.json) and play that one example alone',
    )
    parser.addini(LOADER_INI, "loader class under test (pkg.mod:Class)", default="")


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """After the rootdir's conftests: ``--loader`` for the suite, unless one of them took it."""
    yield
    # A conflict means another plugin or conftest defines --loader: it is theirs.
    with contextlib.suppress(argparse.ArgumentError, ValueError):
        parser.getgroup("loaderspec").addoption(
            SHORT_OPTION,
            dest="loaderspec_loader_short",
            default=None,
            metavar="PKG.MOD:CLASS",
            help=f"the same as {OPTION}",
        )


def _suite_dir() -> Path:
    return suite.location() / "conformance"


def is_conformance_run(config: pytest.Config) -> bool:
    """Whether this session runs the conformance suite (see the module docstring)."""
    if any(getattr(config.option, dest, None) not in (None, 1) for dest in _DEST_OPTIONS):
        return True
    ours = _suite_dir().resolve()
    for arg in config.args:
        path = arg.split("::", 1)[0]
        if config.getoption("pyargs", False) and path.split(".")[:2] == [
            "loaderspec",
            "conformance",
        ]:
            return True
        try:
            resolved = (config.invocation_params.dir / path).resolve()
        except OSError:
            continue
        if resolved == ours or ours in resolved.parents:
            return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spec_property(*names): the spec properties a conformance case checks"
    )
    config.addinivalue_line("markers", "quick: part of the quick (< 60 s) conformance selection")
    config.addinivalue_line(
        "markers",
        "iterators(n): at most n iter() calls in the conformance case (every rank's, every drawn"
        " example's); a loader that declares loaderspec_iterator_start_s gets n times that much"
        " more pytest-timeout limit for the case",
    )
    if not is_conformance_run(config):
        return
    try:
        from loaderspec.conformance import plugin
    except ImportError as exc:  # loaderspec installed without its suite's extra
        raise pytest.UsageError(MSG_NO_SUITE.format(error=exc)) from None

    plugin.start(config)
    from loaderspec import suitetrace

    suitetrace.start(config)
