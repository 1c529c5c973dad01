"""The conformance run: the loader, every case's graded outcome, the report and the verdict.

``loaderspec.pytest_plugin`` (the pytest11 entry point) calls ``start`` once it knows the session
is a conformance run. ``start`` chooses and imports the loader (bad values raise
``pytest.UsageError`` naming the value, its source and the fix), reads the expectation file,
and registers this module (the ``loader_cls`` and ``grade`` fixtures and the per-case hooks) and
a ``ConformanceRun`` (the run's state, the report, the verdict).

Grading happens where a case runs (the pytest process, or an xdist worker): a failed phase is
FAIL, a skipped one SKIP (with its reason), a passed case that recorded a SHOULD deviation
through ``grade`` NON-STRICT, any other PASS. The teardown report carries the case's record
(``report.loaderspec_case``: id, properties, outcome, figures...) and the same as flat JUnit
properties (``loaderspec_grade``, ``loaderspec_properties``...); the ``ConformanceRun`` builds
``report.json`` from those records only, so a run under pytest-xdist reports what a plain run
does. An expected FAIL (``--conformance-expect``) is shown as pytest's xfail, an expected FAIL
that passed as XPASS ("fixed"). With ``--conformance-repeat=N`` each case runs N times and the
worst run is the one reported, with how many runs had which outcome.

``report.json`` is rewritten after every case (a run killed at its time limit still reports what
it finished), and a stale one is removed when the run starts; ``report.md`` and ``report.html``
are rendered once, when the run ends.
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol
from loaderspec.conformance import catalog, expect, ids, loader_ref
from loaderspec.conformance.harness import draws
from loaderspec.conformance.harness.grading import FAIL, NON_STRICT, OUTCOMES, PASS, SKIP, Grade
from loaderspec.conformance.harness.report import shorten
from loaderspec.conformance.verdict import DEFAULT_POLICY, verdict
from loaderspec.faultinject import loaders

from loaderspec import graded
from loaderspec.vocabulary import PROPERTY_NAMES, Level, property_named

__all__ = ["CASES_PLUGIN", "RUN_PLUGIN", "ConformanceRun", "start"]

_GRADE = pytest.StashKey[Grade]()
_CASE = pytest.StashKey["CaseInfo"]()
# Each phase of the case's current run: (when, pytest outcome, detail, duration).
_PHASES = pytest.StashKey[list[tuple[str, str, str, float]]]()
# The property a failed phase's check named (grading.Violation), per phase of the current run.
_FAILED_PROPERTY = pytest.StashKey[str]()
# A drawn case's failing example, encoded (`conformance.harness.draws`), for its replay line.
_DRAW = pytest.StashKey[str]()
REPLAY_OPTION = "--conformance-replay-draw"
MSG_REPLAY_NOT_SELECTED = (
    f"{REPLAY_OPTION}: the draw was recorded by {{case}}, which is not among the selected"
    " cases; select it (its 'replay:' line does)"
)
RUN_PLUGIN = "loaderspec_conformance_run"
CASES_PLUGIN = "loaderspec_conformance_cases"
REPORT_FILES = ("report.json", "report.md", "report.html")
# The markers the suite's cases carry (named in the hint for an -m that selects nothing).
SUITE_MARKERS = ("quick", "spec_property", "iterators")
# Characters of a detail on the terminal's summary line (report.json keeps the whole of it).
SUMMARY_DETAIL = 400
# Worst first: the outcome a repeated case is graded by.
_WORST_FIRST = (FAIL, NON_STRICT, PASS, SKIP)

MSG_UNKNOWN_PROPERTY = (
    "case {case} is marked spec_property({name!r}), which spec/ does not define; "
    "use one of: {known}"
)
MSG_EMPTY_PROPERTY = "case {case} has spec_property() without a property name"
MSG_REPORT_NOT_DIR = (
    "--conformance-report={value}: cannot make a directory there ({error}); give a directory "
    "path that can be created, e.g. --conformance-report=build/conformance"
)
MSG_NOTHING_SELECTED = (
    "loaderspec conformance: -m {expr!r} selected none of the {n} cases: {why}; the suite's "
    "markers: {known} (e.g. -m quick)"
)
ITERATORS = "iterators"  # the marker: at most how many iter() calls a case makes in all
MSG_BAD_ITERATORS = (
    "case {case} is marked iterators({value}); it takes one whole number, 0 or more: the most "
    "iter() calls the case makes in all (every rank's, every drawn example's)"
)


@dataclass(frozen=True)
class CaseInfo:
    """What a collected case is, independent of how it runs."""

    id: str
    file: str
    properties: tuple[str, ...]
    level: str
    guards: str


def start(config: pytest.Config) -> None:
    """Begin a conformance run in this session (see the module docstring).

    Raises:
        pytest.UsageError: the loader cannot be imported or built, an environment variable
            looks like a misspelling of loaderspec's while no loader was named, or the
            expectation file cannot be used. Nothing is registered then.
    """
    out = config.getoption("loaderspec_report")
    if out and not hasattr(config, "workerinput"):
        _usable_report_dir(Path(out))
        # A run that fails to start must not leave an earlier run's results to be read.
        for name in REPORT_FILES:
            (Path(out) / name).unlink(missing_ok=True)
    choice = loader_ref.choose(
        config.getoption("loaderspec_loader"),
        config.getini(loader_ref.INI_KEY),
        short_option=getattr(config.option, "loaderspec_loader_short", None),
    )
    unknown, near = loader_ref.misspelled()
    if unknown and choice.source == loader_ref.SOURCE_DEFAULT:
        raise pytest.UsageError(
            loader_ref.MSG_MISSPELLED.format(
                names=", ".join(unknown),
                near=near,
                default=choice.value,
                option=loader_ref.OPTION,
            )
        )
    if choice.source == loader_ref.SOURCE_DEFAULT:
        elsewhere = _foreign_loader(config)
        if elsewhere is not None:
            where, given, value = elsewhere
            raise pytest.UsageError(
                loader_ref.MSG_NOT_OURS.format(
                    where=where,
                    given=given,
                    default=choice.value,
                    option=loader_ref.OPTION,
                    value=value,
                )
            )
    cwd = config.invocation_params.dir
    loader_ref.importable_from(cwd)
    try:
        loader = loader_ref.resolve(choice, cwd)
        if not hasattr(config, "workerinput") and not config.option.collectonly:
            # A loader that cannot be built stops the run here, with one line, instead of
            # failing every case with its own copy of the traceback.
            loader_ref.build_once(loader, choice)
    except loader_ref.LoaderRefError as exc:
        raise pytest.UsageError(str(exc)) from None
    expectations = None
    if config.getoption("loaderspec_expect"):
        try:
            expectations = expect.load(config.getoption("loaderspec_expect"))
        except expect.ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
    _replay_draw(config.getoption("loaderspec_replay_draw"))
    run = ConformanceRun(config, choice, loader, expectations)
    _hypothesis_home(run)
    run.catch_sigterm()
    if unknown:
        names = ", ".join(unknown)
        run.warnings.append(loader_ref.MSG_MISSPELLED_WARNING.format(names=names, near=near))
    config.pluginmanager.register(sys.modules[__name__], CASES_PLUGIN)
    config.pluginmanager.register(run, RUN_PLUGIN)


def _replay_draw(value: str | None) -> None:
    """``--conformance-replay-draw``: the drawn cases of this process play that draw alone.

    Raises:
        pytest.UsageError: not a draw this suite recorded.
    """
    try:
        draws.replay(draws.decode(value) if value is not None else None)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _only_the_replayed_case(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With a draw to replay, run only the case that recorded it (a usage error when it is not
    selected)."""
    draw = draws.replaying()
    if draw is None:
        return
    keep = [i for i in items if _CASE in i.stash and i.stash[_CASE].id == draw.case]
    if not keep:
        raise pytest.UsageError(MSG_REPLAY_NOT_SELECTED.format(case=draw.case))
    other = [i for i in items if i not in keep]
    if other:
        config.hook.pytest_deselected(items=other)
        items[:] = keep


def _hypothesis_home(run: ConformanceRun) -> None:
    """Keep Hypothesis's files (``.hypothesis/``: its constants cache) out of the user's
    project: under the report directory, else in a temporary one removed when the run ends.
    A home the user chose (``HYPOTHESIS_STORAGE_DIRECTORY``, or one set before the run) stays."""
    from hypothesis import configuration

    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or getattr(
        configuration, "__hypothesis_home_directory", None
    ):
        return
    out = run.config.getoption("loaderspec_report")
    if out:
        home = Path(out) / ".hypothesis"
    else:
        home = Path(tempfile.mkdtemp(prefix="loaderspec-hypothesis-"))
        run.temporary.append(home)
    configuration.set_hypothesis_home_dir(home)


def _usable_report_dir(out: Path) -> None:
    """Create ``--conformance-report``'s directory now, so that a path that cannot be one is a
    usage error before any case runs, not an INTERNALERROR after the first.

    Raises:
        pytest.UsageError: ``out`` is a file, lies under one, or cannot be created.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise pytest.UsageError(
            MSG_REPORT_NOT_DIR.format(value=out, error="it is a file")
        ) from None
    except OSError as exc:
        error = exc.strerror or str(exc)
        raise pytest.UsageError(MSG_REPORT_NOT_DIR.format(value=out, error=error)) from None


def _patterns() -> list[tuple[str, str]]:
    """The failure patterns the harness recognises early (``conformance.harness.scenario``):
    the words a FAIL graded fast carries, and the cause the summary names once."""
    from loaderspec.conformance.harness import scenario

    return [
        (
            scenario.ALIVE_PATTERN,
            "the loader never stops its workers (a dropped iterator or loader)",
        ),
        (scenario.HUNG_PATTERN, "the loader hangs before its first batch (at iter())"),
    ]


def _marker_names(config: pytest.Config) -> list[str]:
    """The markers registered in this session (``markers`` ini lines: ``name(args): help``)."""
    return sorted(
        {re.split(r"[(:]", line, maxsplit=1)[0].strip() for line in config.getini("markers")}
    )


def _nothing_selected(config: pytest.Config, markexpr: str, deselected: int) -> str:
    """The hint for ``-m`` that left no case: which of its names is no marker, and the near one."""
    known = _marker_names(config)
    words = re.findall(r"[A-Za-z_][\w.]*", markexpr)
    unknown = [w for w in words if w not in ("and", "or", "not") and w not in known]
    hints = []
    for word in unknown:
        near = difflib.get_close_matches(word, known, n=1)
        hints.append(
            f"{word!r} is no marker here" + (f" (did you mean {near[0]!r}?)" if near else "")
        )
    why = "; ".join(hints) or "no case has that combination of markers"
    return MSG_NOTHING_SELECTED.format(
        expr=markexpr,
        n=deselected,
        why=why,
        known=", ".join(m for m in known if m in SUITE_MARKERS),
    )


# Where pytest takes arguments from, as the usage error names them.
FROM_COMMAND_LINE = "the command line"
FROM_ENV = "PYTEST_ADDOPTS"
FROM_INI = "the ini file's addopts"
FROM_DEFAULT = "the default of the --loader option a conftest or plugin defines"


def _foreign_loader(config: pytest.Config) -> tuple[str, str, str] | None:
    """A loader given to an option that is not loaderspec's, from any source of arguments:
    (where, the option as given, its value), or None.

    pytest reads the ini file's ``addopts``, ``PYTEST_ADDOPTS`` and the command line alike, and
    a ``--loader`` that a conftest defines takes its value from any of them, or from its own
    default; whichever it is, that value never reaches loaderspec.
    """
    sources = (
        (FROM_COMMAND_LINE, [str(a) for a in config.invocation_params.args]),
        (FROM_ENV, shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))),
        (FROM_INI, [str(a) for a in config.getini("addopts")]),
    )
    for where, args in sources:
        found = loader_ref.passed_elsewhere(args)
        if found is not None:
            return where, *found
    dest = _dest_of(config, loader_ref.SHORT_OPTION)
    value = getattr(config.option, dest, None) if dest else None
    if dest != "loaderspec_loader_short" and isinstance(value, str) and _LOADER_REF.match(value):
        return FROM_DEFAULT, f"{loader_ref.SHORT_OPTION}={value}", value
    return None


def _dest_of(config: pytest.Config, option: str) -> str | None:
    """The dest of ``option`` in this session, whoever defined it: pytest's map of option
    strings to dests, private, on the parser since pytest 9 (on the config before)."""
    for holder in (getattr(config, "_parser", None), config):
        table = getattr(holder, "_opt2dest", None)
        if isinstance(table, dict) and option in table:
            return str(table[option])
    return None


# A value that reads as a loader reference (pkg.mod:Class, pkg.mod.Class), not a word like "fast".
_LOADER_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*$")


def _run(config: pytest.Config) -> ConformanceRun | None:
    return config.pluginmanager.get_plugin(RUN_PLUGIN)


# --------------------------------------------------------------------------- collection


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


def _file_of(item: pytest.Item) -> str:
    """The case file relative to the suite's top (conformance/cases/test_X.py), or as pytest
    names it for a case file outside the suite."""
    module = getattr(getattr(item, "module", None), "__name__", "")
    if module.startswith("loaderspec.conformance.cases."):
        return f"{ids.CASES_DIR}/{module.rsplit('.', 1)[-1]}.py"
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every case's spec_property markers (a typo is a usage error) and note what each
    case is."""
    for item in items:
        props = _properties(item)
        if not props:
            continue
        must = any(property_named(p).level is Level.MUST for p in props)
        fn = getattr(item, "function", None)
        item.stash[_CASE] = CaseInfo(
            ids.of_item(item),
            _file_of(item),
            tuple(props),
            (Level.MUST if must else Level.SHOULD).value,
            catalog.guards(fn) if fn is not None else "",
        )
    _only_the_replayed_case(config, items)
    run = _run(config)
    try:
        start_s = loaders.iterator_start_s(run.loader) if run is not None else 0.0
    except loaders.LoaderRefError as exc:
        raise pytest.UsageError(str(exc)) from None
    if start_s:
        for item in items:
            _allow_starts(item, start_s)


def _allow_starts(item: pytest.Item, start_s: float) -> None:
    """Give a case marked `iterators(n)` n x `start_s` (the seconds the loader declares an
    `iter()` takes to start its workers) more than its pytest-timeout limit: the case's own
    deadlines allow that much per iterator (harness.resume, harness.ranks), so a slow-starting
    loader gets their verdict, not pytest's timeout. Called only for a loader that declares a
    start: one that declares nothing keeps every limit as it is; so does a case run without a
    limit (no pytest-timeout, or a limit of 0)."""
    mark = item.get_closest_marker(ITERATORS)
    if mark is None:
        return
    n = mark.args[0] if len(mark.args) == 1 and not mark.kwargs else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        value = ", ".join([*map(repr, mark.args), *(f"{k}={v!r}" for k, v in mark.kwargs.items())])
        raise pytest.UsageError(MSG_BAD_ITERATORS.format(case=item.nodeid, value=value))
    if not item.config.pluginmanager.hasplugin("timeout"):
        return
    import pytest_timeout

    own = item.get_closest_marker("timeout")
    kwargs = dict(own.kwargs) if own is not None else {}
    if own is not None and own.args:
        kwargs.setdefault("timeout", own.args[0])
        if len(own.args) > 1:
            kwargs.setdefault("method", own.args[1])
    base = kwargs.get("timeout")
    if base is None:
        base = pytest_timeout.get_env_settings(item.config).timeout
    if base:
        kwargs["timeout"] = float(base) + n * start_s
        item.add_marker(pytest.mark.timeout(**kwargs), append=False)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def loader_cls(request: pytest.FixtureRequest) -> type:
    """The loader class under test (chosen and imported once per session)."""
    run = _run(request.config)
    assert run is not None
    return run.loader


@pytest.fixture
def grade(request: pytest.FixtureRequest) -> Grade:
    """Record figures and SHOULD deviations of this case (see conformance.harness.grading)."""
    g = Grade()
    request.node.stash[_GRADE] = g
    return g


# --------------------------------------------------------------------------- grading


def _detail(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).removeprefix("Failed: ").removeprefix("Violation: ")
    if isinstance(report.longrepr, tuple):  # skip: (file, line, reason)
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr or "")


def _loader_errors_text(detail: str) -> str:
    """The errors the loader raised in the case's runs that `detail` does not name yet ("" for
    none): a check that counted batches ("len 4, 0 batches") is read with the worker's death."""
    from loaderspec.conformance.harness import scenario

    missing = [e for e in scenario.loader_errors() if e not in detail]
    return f"; the loader raised: {' | '.join(missing)}" if missing else ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from loaderspec.conformance.harness import scenario

    scenario.forget_played()


def _outcome(phases: list[tuple[str, str, str, float]], g: Grade | None) -> tuple[str, str]:
    """A run's graded outcome and its detail, from its phases."""
    for _, outcome, detail, _ in phases:
        if outcome == "failed":
            return FAIL, detail
    for _, outcome, detail, _ in phases:
        if outcome == "skipped":
            return SKIP, detail
    if g is not None and g.non_strict_notes:
        return NON_STRICT, "; ".join(g.non_strict_notes)
    if g is not None and g.notes:  # e.g. a property that holds trivially for thread workers
        return PASS, "; ".join(g.notes)
    return PASS, ""


def _failed_properties(
    outcome: str, info: CaseInfo, named: str | None, g: Grade | None
) -> list[str]:
    """The properties a case's outcome blames: a FAIL's is the one its failing check named (a
    check that names none, e.g. a case's own setup, blames the case's first MUST marker); a
    NON-STRICT's, the SHOULD properties that were not met; none for a PASS or SKIP."""
    if outcome == FAIL:
        if named:
            return [named]
        must = [p for p in info.properties if property_named(p).level is Level.MUST]
        return (must or list(info.properties))[:1]
    if outcome == NON_STRICT and g is not None:
        return list(g.non_strict_properties) or list(info.properties)[:1]
    return []


def _figures_text(figures: list[dict[str, Any]]) -> str:
    return ", ".join(f"{f['name']}={f['value']:g} {f['unit']}" for f in figures)


def _junit_properties(case: dict[str, Any]) -> list[tuple[str, str]]:
    props = [
        ("loaderspec_id", case["id"]),
        ("loaderspec_grade", case["outcome"]),
        # The properties that decided a FAIL or NON-STRICT; a PASS or SKIP: those it checks.
        ("loaderspec_properties", ", ".join(case["failed_properties"] or case["properties"])),
        ("loaderspec_checks", ", ".join(case["properties"])),
        ("loaderspec_level", case["level"]),
    ]
    if case["figures"]:
        props.append(("loaderspec_figures", _figures_text(case["figures"])))
    if case["detail"]:
        props.append(("loaderspec_detail", case["detail"]))
    if case.get("expected"):
        exp = case["expected"]
        props.append(("loaderspec_expected", f"{exp['outcome']}: {exp['reason']}"))
    if case.get("runs"):
        props.append(("loaderspec_runs", _runs_text(case["runs"])))
    return props


def _runs_text(runs: dict[str, Any]) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in runs["outcomes"].items())
    return f"{runs['n']} runs: {counts}"


def _mark_expected(report: pytest.TestReport, entry: expect.Expectation | None) -> None:
    """Show an expected FAIL as pytest's xfail, and a pass where a FAIL was expected as XPASS."""
    if entry is None or entry.outcome != FAIL:
        return
    reason = f"expected FAIL: {entry.reason}"
    if report.failed:
        report.outcome = "skipped"
        report.wasxfail = reason
    elif report.passed and report.when == "call":
        report.wasxfail = reason


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report: pytest.TestReport = yield
    run = _run(item.config)
    info = item.stash.get(_CASE, None)
    if run is None or info is None:
        return report
    report.loaderspec_id = info.id  # type: ignore[attr-defined]  # JUnit's names, every phase
    phases = item.stash.setdefault(_PHASES, [])
    detail = _detail(report)
    if report.failed and report.when == "call":
        detail += _loader_errors_text(detail)
    phases.append((report.when, report.outcome, detail, report.duration))
    failed_property = getattr(call.excinfo and call.excinfo.value, "property", None)
    example = getattr(call.excinfo and call.excinfo.value, draws.DRAW_ATTR, None)
    if report.failed and example is not None and _DRAW not in item.stash:
        item.stash[_DRAW] = draws.encode(info.id, example)
    if report.failed and failed_property and _FAILED_PROPERTY not in item.stash:
        item.stash[_FAILED_PROPERTY] = str(failed_property)
    g = item.stash.get(_GRADE, None)
    if report.when == "call" and g is not None and g.non_strict_notes:
        # Our own attribute on pytest's report (read by the summary hook); undeclared there.
        report.loaderspec_non_strict = True  # type: ignore[attr-defined]
    entry = run.expectations.of(info.id) if run.expectations else None
    _mark_expected(report, entry)
    if report.when == "teardown":
        outcome, detail = _outcome(phases, g)
        blamed = _failed_properties(outcome, info, item.stash.get(_FAILED_PROPERTY, None), g)
        case: dict[str, Any] = {
            "id": info.id,
            "nodeid": item.nodeid,
            "file": info.file,
            "case": info.id.split("::", 1)[1],
            "properties": list(info.properties),
            "failed_properties": blamed,
            "level": info.level,
            "outcome": outcome,
            "figures": g.as_dict()["figures"] if g is not None else [],
            "detail": detail,
            "duration_s": round(sum(p[3] for p in phases), 3),
            "guards": info.guards,
            "failure_modes": catalog.failure_modes(info.guards),
        }
        if outcome == FAIL and item.stash.get(_DRAW, ""):
            case["draw"] = item.stash[_DRAW]  # the example it failed on: its replay's DRAW
        if entry is not None:
            case["expected"] = {"outcome": entry.outcome, "reason": entry.reason}
        # Our own attribute on pytest's report (read by the JSON report); undeclared there.
        report.loaderspec_case = case  # type: ignore[attr-defined]
        report.user_properties.extend(_junit_properties(case))
        item.stash[_PHASES] = []  # the next run (--conformance-repeat) starts afresh
        for key in (_FAILED_PROPERTY, _DRAW):
            if key in item.stash:
                del item.stash[key]
        if _GRADE in item.stash:
            del item.stash[_GRADE]
    return report


def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, str] | None:
    if (
        report.when == "call"
        and report.passed
        and getattr(report, "loaderspec_non_strict", False)
        and not hasattr(report, "wasxfail")
    ):
        return "non-strict", "N", NON_STRICT
    return None


def _worst(runs: list[list[pytest.TestReport]]) -> int:
    def rank(reports: list[pytest.TestReport]) -> int:
        case = getattr(reports[-1], "loaderspec_case", None)
        return _WORST_FIRST.index(case["outcome"]) if case else len(_WORST_FIRST)

    return min(range(len(runs)), key=lambda i: rank(runs[i]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """``--conformance-repeat=N``: run the case N times, report its worst run (with how many
    runs had which outcome)."""
    run = _run(item.config)
    if run is None or run.repeat == 1 or _CASE not in item.stash:
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    # Each run sets the case up and tears it down whole (the next item decides, as for any
    # case, which fixtures above function scope go: the session's loader stays).
    runs = [runtestprotocol(item, nextitem=nextitem, log=False) for _ in range(run.repeat)]
    worst = runs[_worst(runs)]
    outcomes = Counter(getattr(r[-1], "loaderspec_case", {}).get("outcome", "?") for r in runs)
    case = getattr(worst[-1], "loaderspec_case", None)
    if case is not None:
        case["runs"] = {
            "n": run.repeat,
            "failed": outcomes.get(FAIL, 0),
            "outcomes": {k: outcomes[k] for k in _WORST_FIRST if outcomes.get(k)},
        }
        worst[-1].user_properties.append(("loaderspec_runs", _runs_text(case["runs"])))
    for report in worst:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


# --------------------------------------------------------------------------- the run


def _versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    # the loaders the matrix grades (those the run imported), so a report names what it graded
    for name in dict.fromkeys(g.package for g in graded.LOADERS):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version:
            found[name] = str(version)
    return found


class ConformanceRun:
    """One conformance run: the loader under test, each case's graded outcome, the report, the
    verdict. On an xdist worker it only holds the loader and the expectations; the controller
    (or a plain session) collects the cases' records and writes the report."""

    def __init__(
        self,
        config: pytest.Config,
        choice: loader_ref.Choice,
        loader: type,
        expectations: expect.Expectations | None,
    ) -> None:
        self.config = config
        self.choice = choice
        self.loader = loader
        self.expectations = expectations
        self.policy: str = config.getoption("loaderspec_fail_on") or DEFAULT_POLICY
        self.repeat: int = config.getoption("loaderspec_repeat") or 1
        self.cases: dict[str, dict[str, Any]] = {}
        self.other_failures: set[str] = set()  # node ids of failed reports (cases' too)
        self.warnings: list[str] = list(expectations.warnings if expectations else ())
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.worker = hasattr(config, "workerinput")  # an xdist worker: the controller reports
        out = config.getoption("loaderspec_report")
        self.report_dir = Path(out) if out and not self.worker else None
        self.verdict = verdict([], self.policy)
        self.temporary: list[Path] = []  # directories of this run, removed when it ends
        self.deselected = 0  # cases left out by -m/-k, for the hint when nothing is left
        self.selected: int | None = None  # cases to run (None: not known here, under xdist)
        self.signal: str | None = None  # the signal that stopped the run, if one did
        self._sigterm_before: Any = None

    def catch_sigterm(self) -> None:
        """Make SIGTERM (what CI cancels with after Ctrl-C, or instead of it) stop the run as
        Ctrl-C does: the running case's ``finally`` blocks kill its processes by PID, and the
        report is written, saying the run was stopped. A handler the user installed stays."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def stop(signum: int, frame: Any) -> None:
            self.signal = signal.Signals(signum).name
            raise KeyboardInterrupt(f"stopped by {self.signal}")

        self._sigterm_before = signal.signal(signal.SIGTERM, stop)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._sigterm_before is not None:
            signal.signal(signal.SIGTERM, self._sigterm_before)
        for path in self.temporary:
            shutil.rmtree(path, ignore_errors=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items or not session.config.pluginmanager.hasplugin("dsession"):
            self.selected = sum(_CASE in item.stash for item in session.items)

    def _stopped(self, session: pytest.Session) -> str | None:
        """Why the run did not finish every case it selected (None: it did)."""
        if session.config.option.collectonly:
            return "collection only (--co): no case ran"
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:
            return f"interrupted by {self.signal or 'SIGINT (Ctrl-C)'}"
        for why in (session.shouldstop, session.shouldfail):
            if why:
                return str(why)
        if self.selected is not None and len(self.cases) < self.selected:
            return f"{self.selected - len(self.cases)} of the selected cases did not finish"
        return None

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        why = loader_ref.WHY.get(self.choice.source, "")
        lines = [
            f"loaderspec conformance: loader {self.choice.value} (from {self.choice.source}: {why})"
        ]
        settings = [f"fail on {self.policy}"]
        if self.expectations is not None:
            settings.append(
                f"expectations {self.expectations.file} ({len(self.expectations.entries)})"
            )
        if self.repeat > 1:
            settings.append(f"each case {self.repeat} times, the worst run graded")
        lines.append("loaderspec conformance: " + ", ".join(settings))
        lines += [f"loaderspec conformance: warning: {w}" for w in self.warnings]
        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _junit_names(self.config, report)
        if report.failed and not hasattr(report, "wasxfail"):
            self.other_failures.add(report.nodeid)
        case = getattr(report, "loaderspec_case", None)
        if case is None or self.worker:
            return
        case = dict(case)
        if self.expectations is not None:
            status = self.expectations.status(case["id"], case["outcome"])
            if status is not None:
                case["expectation"] = status
        self.cases[case["id"]] = case
        if self.report_dir is not None:
            # After every case, so a run killed from outside (a loader that hangs a whole run
            # past `loaderspec report`'s limit) still leaves the cases it finished.
            from loaderspec.conformance.harness.report import write_json

            write_json(self.report_dir, self.results(complete=False))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.other_failures.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.worker:
            return
        self.verdict = verdict(list(self.cases.values()), self.policy)
        graded = {c["nodeid"] for c in self.cases.values()}
        # The policy decides when nothing but graded cases failed; anything else (a usage or
        # internal error, an interruption, nothing collected, a failure outside the cases)
        # keeps pytest's status.
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) and not (
            self.other_failures - graded
        ):
            session.exitstatus = (
                pytest.ExitCode.TESTS_FAILED if self.verdict.failed else pytest.ExitCode.OK
            )
        if self.report_dir is not None:
            from loaderspec.conformance.harness.report import write_report

            stopped = self._stopped(session)
            write_report(self.report_dir, self.results(complete=stopped is None, stopped=stopped))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker:
            return
        markexpr = self.config.getoption("markexpr", "")
        if not self.cases and self.deselected and markexpr:
            terminalreporter.line(_nothing_selected(self.config, markexpr, self.deselected))
        if not self.cases:
            return
        tr = terminalreporter
        tr.section("loaderspec conformance")
        counts = Counter(c["outcome"] for c in self.cases.values())
        tr.line(
            f"loader {self.choice.value}: " + ", ".join(f"{counts.get(o, 0)} {o}" for o in OUTCOMES)
        )
        for pattern, cause in _patterns():
            hit = [
                c for c in self.cases.values() if c["outcome"] == FAIL and pattern in c["detail"]
            ]
            if hit:
                tr.line(
                    f"one cause, {len(hit)} more FAILs graded in seconds each: {cause} "
                    f"(first: {hit[0]['id']})",
                    bold=True,
                )
        for case in self.cases.values():
            line = _summary_line(case)
            if line:
                tr.line(line)
            if case["outcome"] == FAIL:
                tr.line(f"  rerun: {_rerun(case, self)}")
            if case["outcome"] == FAIL and case.get("draw"):
                tr.line(f"  replay: {_rerun(case, self)} {REPLAY_OPTION}={case['draw']}")
        state = "FAILED" if self.verdict.failed else "passed"
        tr.line(f"verdict (--conformance-fail-on={self.policy}): {state}", bold=True)
        for reason in self.verdict.reasons:
            tr.line(f"  {reason}")

    def results(self, complete: bool, stopped: str | None = None) -> dict[str, Any]:
        """The run's report.json (the contract in docs/contracts.md): ``complete`` only once
        every selected case finished; a stopped run says why and how many cases it finished."""
        out: dict[str, Any] = {
            "loader": self.choice.value,
            "loader_source": self.choice.source,
            "started": self.started,
            "complete": complete,
            "finished": len(self.cases),
            "selected": self.selected,
            "versions": _versions(),
            "policy": self.policy,
            "repeat": self.repeat,
            "expectations": self.expectations.file if self.expectations else None,
            "cases": sorted(self.cases.values(), key=lambda c: c["id"]),
        }
        if stopped:
            out["stopped"] = stopped
        if complete:
            out["verdict"] = self.verdict.as_dict()
        return out


def _rerun(case: dict[str, Any], run: ConformanceRun) -> str:
    """The command that runs this one case again from the same directory, with this run's
    interpreter (a CI job's venv need not be activated) and its conformance options: pytest's
    node id (its parameters in pytest's order, which the stable id, sorted by name, does not
    keep). A drawn case draws the same examples again (its draws are derandomized)."""
    cmd = [sys.executable, "-m", "pytest", case["nodeid"]]
    if run.choice.source != loader_ref.SOURCE_DEFAULT:
        cmd.append(f"{loader_ref.OPTION}={run.choice.value}")
    option = run.config.getoption
    for flag, dest in (
        ("--conformance-expect", "loaderspec_expect"),
        ("--conformance-fail-on", "loaderspec_fail_on"),
        ("--conformance-repeat", "loaderspec_repeat"),
    ):
        value = option(dest)
        if value is not None and not (dest == "loaderspec_repeat" and value == 1):
            cmd.append(f"{flag}={value}")
    return shlex.join(cmd)


def _junit_names(config: pytest.Config, report: pytest.TestReport) -> None:
    """With --junitxml, name a case's <testcase> by its stable id (classname
    ``conformance.test_exactly_once``, name ``test_len_...[drop_last=True]``), not by where the
    suite was installed (pytest's node id: ``.venv.lib.python3.11.site-packages...``). Set before
    pytest's junitxml reads the report, as a user's own attributes, which it keeps."""
    cid = getattr(report, "loaderspec_id", None)
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it: pytest's own names stay
        return
    xml = config.stash.get(xml_key, None)
    if cid is None or xml is None:
        return
    module, _, name = cid.partition("::")
    attrs = xml.node_reporter(report).attrs
    attrs["classname"] = f"loaderspec.conformance.{module}"
    attrs["name"] = name


def _summary_line(case: dict[str, Any]) -> str:
    """One terminal line for a case worth a look: NON-STRICT (and its figures), FAIL, an
    expectation's outcome, a racy case; "" for a plain PASS or SKIP."""
    tags = []
    if case.get("expectation") == expect.FIXED:
        tags.append(f"FIXED (expected {case['expected']['outcome']}: remove it from the file)")
    elif case.get("expectation") == expect.EXPECTED:
        tags.append(f"expected: {case['expected']['reason']}")
    elif case.get("expectation") == expect.REGRESSION:
        tags.append(f"REGRESSION (expected {case['expected']['outcome']})")
    runs = case.get("runs")
    if runs and len(runs["outcomes"]) > 1:
        tags.append(f"RACY: {_runs_text(runs)}")
    if case["outcome"] in (PASS, SKIP) and not tags:
        return ""
    figures = _figures_text(case["figures"])
    text = f"{case['outcome']} {case['id']}"
    if tags:
        text += " [" + "; ".join(tags) + "]"
    if case["detail"]:
        lines = case["detail"].splitlines()
        first = lines[0] + (" …" if len(lines) > 1 else "")
        text += f": {shorten(first, SUMMARY_DETAIL)}"
    if figures:
        text += f" ({figures})"
    return text
