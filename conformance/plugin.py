"""pytest11 entry point of the conformance suite (``loaderspec_conformance``).

Loaded in every pytest session of an environment where loaderspec is installed, so it stays cheap
and silent unless the session is a conformance run: ``--loader`` or ``--conformance-report`` was
given, or a collected path lies inside the ``conformance`` package. Only then is the loader
imported (bad values raise ``pytest.UsageError`` naming the value, its source and the fix), the
header line printed, and a ``ConformanceRun`` registered: the plugin object that holds the run's
state (the loader, every case's graded outcome) and writes the report.

Outcomes: a failed case is FAIL, a skipped one SKIP (with its reason), a passed case that recorded
a SHOULD deviation through the ``grade`` fixture is NON-STRICT, any other passed case PASS.
``report.json`` is rewritten after every case (a run killed at its time limit still reports what
it finished); ``report.md`` and ``report.html`` are rendered once, when the run ends.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance import loader_ref
from conformance.harness.grading import FAIL, NON_STRICT, PASS, SKIP, Grade
from loaderspec.vocabulary import PROPERTY_NAMES, Level, property_named

_PKG_DIR = Path(__file__).resolve().parent
_GRADE = pytest.StashKey[Grade]()
RUN_PLUGIN = "loaderspec_conformance_run"

MSG_UNKNOWN_PROPERTY = (
    "case {case} is marked spec_property({name!r}), which spec/ does not define; "
    "use one of: {known}"
)
MSG_EMPTY_PROPERTY = "case {case} has spec_property() without a property name"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loaderspec", "loaderspec conformance suite")
    group.addoption(
        loader_ref.OPTION,
        dest="loaderspec_loader",
        default=None,
        metavar="PKG.MOD:CLASS",
        help=f"loader class under test (env {loader_ref.ENV_VAR}, ini {loader_ref.INI_KEY}; "
        f"default {loader_ref.DEFAULT})",
    )
    group.addoption(
        "--conformance-report",
        dest="loaderspec_report",
        default=None,
        metavar="DIR",
        help="write report.json, report.md and report.html of the conformance run into DIR",
    )
    parser.addini(loader_ref.INI_KEY, "loader class under test (pkg.mod:Class)", default="")


def _is_conformance_run(config: pytest.Config) -> bool:
    if config.getoption("loaderspec_loader") or config.getoption("loaderspec_report"):
        return True
    for arg in config.args:
        path = arg.split("::", 1)[0]
        if config.getoption("pyargs", False) and path.split(".")[0] == "conformance":
            return True
        try:
            resolved = (config.invocation_params.dir / path).resolve()
        except OSError:
            continue
        if resolved == _PKG_DIR or _PKG_DIR in resolved.parents:
            return True
    return False


def _choose_and_import(config: pytest.Config) -> tuple[loader_ref.Choice, type]:
    """Choose the loader (option, env, ini, default) and import it; a bad value is a usage
    error naming it, where it came from and the fix."""
    choice = loader_ref.choose(
        config.getoption("loaderspec_loader"), config.getini(loader_ref.INI_KEY)
    )
    try:
        return choice, loader_ref.resolve(choice)
    except loader_ref.LoaderRefError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spec_property(*names): the spec properties a conformance case checks"
    )
    config.addinivalue_line("markers", "quick: part of the quick (< 30 s) conformance selection")
    if _is_conformance_run(config):
        choice, loader = _choose_and_import(config)
        config.pluginmanager.register(ConformanceRun(config, choice, loader), RUN_PLUGIN)


def _properties(item: pytest.Item) -> list[str]:
    names: list[str] = []
    for mark in item.iter_markers("spec_property"):
        if not mark.args:
            raise pytest.UsageError(MSG_EMPTY_PROPERTY.format(case=item.nodeid))
        for name in mark.args:
            if name not in PROPERTY_NAMES:
                known = ", ".join(sorted(PROPERTY_NAMES))
                raise pytest.UsageError(
                    MSG_UNKNOWN_PROPERTY.format(case=item.nodeid, name=name, known=known)
                )
            names.append(name)
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every case's spec_property markers (in any session: a typo is a usage error);
    a conformance run records its cases."""
    run = config.pluginmanager.get_plugin(RUN_PLUGIN)
    for item in items:
        props = _properties(item)
        if props and run is not None:
            run.add_case(item, props)


@pytest.fixture(scope="session")
def loader_cls(request: pytest.FixtureRequest) -> type:
    """The loader class under test (chosen and imported once per session)."""
    run = request.config.pluginmanager.get_plugin(RUN_PLUGIN)
    return run.loader if run is not None else _choose_and_import(request.config)[1]


@pytest.fixture
def grade(request: pytest.FixtureRequest) -> Grade:
    """Record figures and SHOULD deviations of this case (see conformance.harness.grading)."""
    g = Grade()
    request.node.stash[_GRADE] = g
    return g


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    g = item.stash.get(_GRADE, None)
    if g is not None and report.when == "call":
        report.user_properties.append(("loaderspec_grade", g.as_dict()))
    return report


def _grade_of(report: pytest.TestReport) -> dict[str, Any] | None:
    for key, value in report.user_properties:
        if key == "loaderspec_grade":
            return value
    return None


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str] | None:
    if report.when == "call" and report.passed:
        g = _grade_of(report)
        if g and g["non_strict"]:
            return "non-strict", "N", NON_STRICT
    return None


def _detail(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).removeprefix("Failed: ")
    if isinstance(report.longrepr, tuple):  # skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr or "")


def _versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in ("torch", "torchdata", "paddle", "loaderspec"):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version:
            found[name] = str(version)
    return found


class ConformanceRun:
    """One conformance run: the loader under test, each case's graded outcome, the report."""

    def __init__(self, config: pytest.Config, choice: loader_ref.Choice, loader: type) -> None:
        self.config = config
        self.choice = choice
        self.loader = loader
        self.cases: dict[str, dict[str, Any]] = {}
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        out = config.getoption("loaderspec_report")
        self.report_dir = Path(out) if out else None

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return [f"loaderspec conformance: loader {self.choice.value} (from {self.choice.source})"]

    def add_case(self, item: pytest.Item, props: list[str]) -> None:
        """Grade `item`, which checks the spec properties `props` (PASS until it reports)."""
        must = any(property_named(p).level is Level.MUST for p in props)
        self.cases[item.nodeid] = {
            "nodeid": item.nodeid,
            "case": item.name,
            "properties": props,
            "level": (Level.MUST if must else Level.SHOULD).value,
            "outcome": PASS,
            "figures": [],
            "detail": "",
            "duration_s": 0.0,
        }

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.get(report.nodeid)
        if case is None:
            return
        case["ran"] = True
        case["duration_s"] = round(case["duration_s"] + report.duration, 3)
        g = _grade_of(report)
        if g:
            case["figures"] = g["figures"]
        if report.failed:
            case["outcome"] = FAIL
            case["detail"] = _detail(report)
        elif report.skipped and case["outcome"] != FAIL:
            case["outcome"] = SKIP
            case["detail"] = _detail(report).removeprefix("Skipped: ")
        elif report.when == "call" and g and g["non_strict"] and case["outcome"] == PASS:
            case["outcome"] = NON_STRICT
            case["detail"] = "; ".join(g["non_strict"])
        elif report.when == "call" and g and g.get("notes") and case["outcome"] == PASS:
            case["detail"] = "; ".join(g["notes"])
        if report.when == "teardown" and self.report_dir is not None:
            # After every case, so a run killed from outside (a loader that hangs a whole run
            # past `loaderspec report`'s limit) still leaves the cases it finished.
            from conformance.harness.report import write_json

            write_json(self.report_dir, self.results(complete=False))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.report_dir is not None:
            from conformance.harness.report import write_report

            write_report(self.report_dir, self.results(complete=True))

    def results(self, complete: bool) -> dict[str, Any]:
        """The run's report.json (the contract in docs/contracts.md)."""
        return {
            "loader": self.choice.value,
            "loader_source": self.choice.source,
            "started": self.started,
            "complete": complete,
            "versions": _versions(),
            "cases": [
                {k: v for k, v in c.items() if k != "ran"}
                for c in self.cases.values()
                if c.get("ran")
            ],
        }
