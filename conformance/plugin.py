"""pytest11 entry point of the conformance suite (``loaderspec_conformance``).

Loaded in every pytest session of an environment where loaderspec is installed, so it stays cheap
and silent unless the session is a conformance run: ``--loader`` was given, or a collected path
lies inside the ``conformance`` package. Only then is the loader imported (bad values raise
``pytest.UsageError`` naming the value, its source and the fix) and the header line printed.

Outcomes: a failed case is FAIL, a skipped one SKIP (with its reason), a passed case that recorded
a SHOULD deviation through the ``grade`` fixture is NON-STRICT, any other passed case PASS.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance import loader_ref
from conformance.grading import FAIL, NON_STRICT, PASS, SKIP, Grade
from loaderspec.vocabulary import PROPERTY_NAMES, Level, property_named

_PKG_DIR = Path(__file__).resolve().parent
_CHOICE = pytest.StashKey[loader_ref.Choice]()
_LOADER = pytest.StashKey[type]()
_CASES = pytest.StashKey[dict[str, dict[str, Any]]]()
_STARTED = pytest.StashKey[str]()
_GRADE = pytest.StashKey[Grade]()

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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spec_property(*names): the spec properties a conformance case checks"
    )
    config.addinivalue_line("markers", "quick: part of the quick (< 30 s) conformance selection")
    if not _is_conformance_run(config):
        return
    _resolve_loader(config)
    config.stash[_CASES] = {}
    config.stash[_STARTED] = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"
    )


def _resolve_loader(config: pytest.Config) -> None:
    """Choose the loader (option, env, ini, default), import it, stash both; a bad value is a
    usage error naming it, where it came from and the fix."""
    choice = loader_ref.choose(
        config.getoption("loaderspec_loader"), config.getini(loader_ref.INI_KEY)
    )
    try:
        config.stash[_LOADER] = loader_ref.resolve(choice)
    except loader_ref.LoaderRefError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_CHOICE] = choice


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if _CHOICE not in config.stash:
        return None
    choice = config.stash[_CHOICE]
    return [f"loaderspec conformance: loader {choice.value} (from {choice.source})"]


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
    for item in items:
        props = _properties(item)
        if not props or _CASES not in config.stash:
            continue
        must = any(property_named(p).level is Level.MUST for p in props)
        config.stash[_CASES][item.nodeid] = {
            "nodeid": item.nodeid,
            "case": item.name,
            "properties": props,
            "level": (Level.MUST if must else Level.SHOULD).value,
            "outcome": PASS,
            "figures": [],
            "detail": "",
            "duration_s": 0.0,
        }


@pytest.fixture(scope="session")
def loader_cls(request: pytest.FixtureRequest) -> type:
    """The loader class under test (resolved once per session)."""
    config = request.config
    if _LOADER not in config.stash:
        _resolve_loader(config)
    return config.stash[_LOADER]


@pytest.fixture
def grade(request: pytest.FixtureRequest) -> Grade:
    """Record figures and SHOULD deviations of this case (see conformance.grading)."""
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


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _session_config.get("config")
    if config is None or _CASES not in config.stash:
        return
    case = config.stash[_CASES].get(report.nodeid)
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
    if report.when == "teardown":
        # After every case, so a run killed from outside (a loader that hangs a whole run past
        # `loaderspec report`'s limit) still leaves the cases it finished.
        _write_results(config, complete=False)


# pytest_runtest_logreport gets no config argument; the session's config is kept here.
_session_config: dict[str, pytest.Config] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    _session_config["config"] = session.config


def pytest_sessionfinish(session: pytest.Session) -> None:
    _session_config.pop("config", None)
    _write_results(session.config, complete=True)


def _write_results(config: pytest.Config, complete: bool) -> None:
    out = config.getoption("loaderspec_report")
    if not out or _CASES not in config.stash:
        return
    from conformance import results  # only when a report is asked for

    choice = config.stash[_CHOICE]
    data = {
        "loader": choice.value,
        "loader_source": choice.source,
        "started": config.stash[_STARTED],
        "complete": complete,
        "versions": _versions(),
        "cases": [
            {k: v for k, v in c.items() if k != "ran"}
            for c in config.stash[_CASES].values()
            if c.get("ran")
        ],
    }
    results.write(Path(out), data)


def _versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in ("torch", "torchdata", "paddle", "loaderspec"):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version:
            found[name] = str(version)
    return found
