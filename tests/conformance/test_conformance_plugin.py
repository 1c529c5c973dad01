"""The conformance plugin: loader choice and its precedence, UsageError messages, the header,
marker validation, graded outcomes and the report files. Run through pytest subprocesses (the
plugin is loaded by its pytest11 entry point, as for any user)."""

from __future__ import annotations

import json
import re
import shlex
import sys
import textwrap
from pathlib import Path

import pytest
from loaderspec.conformance import loader_ref, plugin
from loaderspec.conformance.plugin import MSG_UNKNOWN_PROPERTY

from loaderspec import conformance

pytest_plugins = ["pytester"]

FAKE_LOADER = """
class Loader:
    def __init__(self, dataset, **kwargs):
        self.dataset = dataset
"""


@pytest.fixture
def env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with an importable fake loader module and a tiny graded case file."""
    monkeypatch.delenv(loader_ref.ENV_VAR, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    pytester.makepyfile(fakeloader=FAKE_LOADER)
    return pytester


def test_choose_precedence_is_option_env_ini_default() -> None:
    env = {loader_ref.ENV_VAR: "e.m:C"}
    assert loader_ref.choose("o.m:C", "i.m:C", env, short_option="s.m:C") == loader_ref.Choice(
        "o.m:C", loader_ref.SOURCE_OPTION
    )
    assert loader_ref.choose(None, "i.m:C", env, short_option="s.m:C") == loader_ref.Choice(
        "s.m:C", loader_ref.SOURCE_SHORT_OPTION
    )
    assert loader_ref.choose(None, "i.m:C", env).source == loader_ref.SOURCE_ENV
    assert loader_ref.choose(None, "i.m:C", {}).source == loader_ref.SOURCE_INI
    assert loader_ref.choose(None, "", {}) == loader_ref.Choice(
        loader_ref.DEFAULT, loader_ref.SOURCE_DEFAULT
    )


@pytest.mark.parametrize("value", ["torch.utils.data:DataLoader", "torch.utils.data.DataLoader"])
def test_both_spellings_resolve(value: str) -> None:
    from torch.utils.data import DataLoader

    assert loader_ref.resolve(loader_ref.Choice(value, "test")) is DataLoader


@pytest.mark.parametrize(
    ("value", "template"),
    [
        ("nodots", loader_ref.MSG_MALFORMED),
        ("no_such_pkg_xyz.mod:Loader", loader_ref.MSG_NO_MODULE),
        ("fakeloader:Missing", loader_ref.MSG_NO_ATTR),
    ],
)
def test_bad_loader_is_a_usage_error_naming_value_source_and_fix(
    env: pytest.Pytester, value: str, template: str
) -> None:
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess(f"--loader={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    assert repr(value) in err
    assert loader_ref.SOURCE_SHORT_OPTION in err
    assert loader_ref.FIX in err
    assert template.split("{")[0].strip() in err  # the message's fixed opening words


def test_env_var_wins_over_ini_and_is_reported(
    env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.makeini(f"[pytest]\n{loader_ref.INI_KEY} = fakeloader:Missing\n")
    env.makepyfile(test_x="def test_x(loader_cls):\n    assert loader_cls.__name__ == 'Loader'\n")
    monkeypatch.setenv(loader_ref.ENV_VAR, "fakeloader:Loader")
    result = env.runpytest_subprocess("--conformance-report", str(env.path / "rep"))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"*loader fakeloader:Loader (from {loader_ref.SOURCE_ENV}: set in the environment)*"]
    )


def test_bad_ini_value_names_the_ini_key(env: pytest.Pytester) -> None:
    env.makeini(f"[pytest]\n{loader_ref.INI_KEY} = fakeloader:Missing\n")
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess("--conformance-report", str(env.path / "rep"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert loader_ref.SOURCE_INI in result.stderr.str()


def test_silent_outside_a_conformance_run(
    env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --loader and nothing collected from conformance/: no header, no import of a loader
    (an unimportable env value must not break other projects' test runs)."""
    monkeypatch.setenv(loader_ref.ENV_VAR, "no_such_pkg_xyz:Loader")
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "loaderspec conformance" not in result.stdout.str()


def test_unknown_spec_property_is_rejected(env: pytest.Pytester) -> None:
    env.makepyfile(
        test_x=textwrap.dedent(
            """
            import pytest

            @pytest.mark.spec_property("NoSuchProperty")
            def test_x():
                pass
            """
        )
    )
    result = env.runpytest_subprocess("--loader=fakeloader:Loader")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = MSG_UNKNOWN_PROPERTY.split("{")[0]
    assert expected in result.stderr.str()
    assert "NoSuchProperty" in result.stderr.str()


GRADED = """
import pytest

@pytest.mark.spec_property("ExactlyOnce")
def test_pass(grade):
    grade.figure("x_s", 0.1)

@pytest.mark.spec_property("PromptFaultHandling")
def test_non_strict(grade):
    grade.non_strict("PromptFaultHandling", 5.0, "took 5 s")

@pytest.mark.spec_property("ExactlyOnce")
def test_fail(grade):
    grade.fail("ExactlyOnce", "1", "2")

@pytest.mark.spec_property("NoDeadlock")
def test_skip():
    pytest.skip("no accelerator")

def test_must_violation_cannot_be_non_strict(grade):
    with pytest.raises(ValueError):
        grade.non_strict("ExactlyOnce")
"""


def test_graded_outcomes_and_report_files(env: pytest.Pytester) -> None:
    env.makepyfile(test_x=GRADED)
    rep = env.path / "rep"
    result = env.runpytest_subprocess("--loader=fakeloader:Loader", f"--conformance-report={rep}")
    result.stdout.fnmatch_lines(["*1 failed, 2 passed, 1 skipped, 1 non-strict*"])
    data = json.loads((rep / "report.json").read_text())
    got = {c["case"]: c for c in data["cases"]}
    assert {k: v["outcome"] for k, v in got.items()} == {
        "test_pass": "PASS",
        "test_non_strict": "NON-STRICT",
        "test_fail": "FAIL",
        "test_skip": "SKIP",
    }
    assert got["test_fail"]["detail"].startswith("ExactlyOnce (MUST): expected 1; actual 2")
    assert got["test_skip"]["detail"] == "no accelerator"
    assert got["test_non_strict"]["figures"] == [
        {"name": "PromptFaultHandling", "value": 5.0, "unit": "s"}
    ]
    assert got["test_non_strict"]["level"] == "SHOULD"
    assert data["loader"] == "fakeloader:Loader"
    assert data["complete"] is True
    assert data["loader_source"] == loader_ref.SOURCE_SHORT_OPTION
    assert "NON-STRICT" in (rep / "report.md").read_text()
    html_page = (rep / "report.html").read_text()
    assert '<table class="r">' in html_page
    assert html_page.index(">FAIL<") < html_page.index(">PASS<")  # FAILs first


REFUSING_LOADERS = """
from torch.utils.data import DataLoader


class Declares(DataLoader):
    @classmethod
    def loaderspec_unsupported(cls, **loader_kwargs):
        return "no workers here" if loader_kwargs.get("num_workers") else None


class Raises(DataLoader):
    def __init__(self, dataset, **kwargs):
        if kwargs.get("num_workers"):
            raise NotImplementedError("workers are not implemented")
        super().__init__(dataset, **kwargs)
"""

CASE_WITH_WORKERS = """
import pytest
from loaderspec.conformance.harness import play

@pytest.mark.spec_property("ExactlyOnce")
def test_x(loader_cls, grade):
    play(loader_cls, n=4, kwargs={"num_workers": 2})
"""


@pytest.mark.parametrize(
    ("loader", "reason"),
    [("Declares", "no workers here"), ("Raises", "workers are not implemented")],
)
def test_a_configuration_the_loader_cannot_express_is_a_skip_with_its_reason(
    env: pytest.Pytester, loader: str, reason: str
) -> None:
    """`loaderspec_unsupported` (asked before anything starts) or NotImplementedError from the
    constructor (its type decides, not its text): a SKIP whose reason is the loader's line."""
    env.makepyfile(refusing=REFUSING_LOADERS, test_x=CASE_WITH_WORKERS)
    rep = env.path / "rep"
    result = env.runpytest_subprocess(f"--loader=refusing:{loader}", f"--conformance-report={rep}")
    result.assert_outcomes(skipped=1)
    [case] = json.loads((rep / "report.json").read_text())["cases"]
    assert case["outcome"] == "SKIP"
    assert reason in case["detail"]


def test_pyargs_collects_the_installed_suite_outside_the_checkout(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest --pyargs loaderspec.conformance -m quick` from a directory that is not the
    checkout: the installed package is collected (every file with a quick case) and the
    default loader, the reference, wins. (The quick run itself is timed in docs/conformance.md.)"""
    monkeypatch.delenv(loader_ref.ENV_VAR, raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    result = pytester.runpytest_subprocess(
        "--pyargs", "loaderspec.conformance", "-m", "quick", "--co", "-p", "no:cacheprovider",
        timeout=120,
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(
        [f"*loader {loader_ref.DEFAULT} (from {loader_ref.SOURCE_DEFAULT}: no *)*"]
    )
    files = set(re.findall(r"<Module (test_\w+\.py)>", result.stdout.str()))
    suite = Path(conformance.__file__).parent / "cases"
    assert files == {f.name for f in suite.glob("test_*.py") if "mark.quick" in f.read_text()}


def _comparable(report: Path) -> list[dict]:
    cases = json.loads(report.read_text())["cases"]
    return [{k: v for k, v in c.items() if k != "duration_s"} for c in cases]


def test_xdist_gives_the_same_report(env: pytest.Pytester) -> None:
    """Each case's record travels to the xdist controller in its teardown report."""
    env.makepyfile(test_x=GRADED)
    got = {}
    for name, extra in (("plain", []), ("xdist", ["-n", "2"])):
        rep = env.path / name
        result = env.runpytest_subprocess(
            "--loader=fakeloader:Loader", f"--conformance-report={rep}", *extra
        )
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["*NON-STRICT test_x::test_non_strict*took 5 s*"])
        got[name] = _comparable(rep / "report.json")
    assert len(got["plain"]) == 4
    assert got["xdist"] == got["plain"]


OWN_LOADER_OPTION = """
def pytest_addoption(parser):
    parser.addoption("--loader", default=None, help="this project's own option")
"""


@pytest.mark.parametrize(
    "spelling", [["--loader=fakeloader:Loader"], ["--loader", "fakeloader:Loader"]]
)
def test_a_loader_passed_to_a_conftests_option_is_a_usage_error_not_the_default(
    env: pytest.Pytester, spelling: list[str]
) -> None:
    """A project whose conftest defines --loader: the value never reaches loaderspec, and a run
    that would grade the default loader instead refuses, naming both and the fix."""
    env.makeconftest(OWN_LOADER_OPTION)
    result = env.runpytest_subprocess(
        "--pyargs", "loaderspec.conformance", "-m", "quick", "--co", *spelling
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    assert "--loader=fakeloader:Loader" in err
    assert loader_ref.DEFAULT in err
    assert f"{loader_ref.OPTION}=fakeloader:Loader" in err


@pytest.mark.parametrize("source", ["ini", "env", "default"])
def test_a_loader_given_to_a_conftests_option_from_any_source_is_a_usage_error(
    env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """The same trap through the ini file's addopts, PYTEST_ADDOPTS and the conftest option's
    own default: each reached the conftest's option, and the run graded the reference, rc 0."""
    default = "fakeloader:Loader" if source == "default" else None
    env.makeconftest(OWN_LOADER_OPTION.replace("default=None", f"default={default!r}"))
    if source == "ini":
        env.makeini("[pytest]\naddopts = --loader=fakeloader:Loader\n")
    elif source == "env":
        monkeypatch.setenv("PYTEST_ADDOPTS", "--loader=fakeloader:Loader")
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess("--conformance-report", str(env.path / "rep"), "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    where = {"ini": plugin.FROM_INI, "env": plugin.FROM_ENV, "default": plugin.FROM_DEFAULT}
    assert where[source] in err
    assert f"{loader_ref.OPTION}=fakeloader:Loader" in err


def test_a_conftests_own_loader_option_with_a_plain_word_is_left_alone(
    env: pytest.Pytester,
) -> None:
    env.makeconftest(OWN_LOADER_OPTION.replace("default=None", "default='fast'"))
    env.makepyfile(test_x="def test_x(loader_cls):\n    pass\n")
    result = env.runpytest_subprocess("--conformance-report", str(env.path / "rep"))
    result.assert_outcomes(passed=1)


def test_the_long_option_grades_the_users_loader_beside_a_conftests_loader(
    env: pytest.Pytester,
) -> None:
    env.makeconftest(OWN_LOADER_OPTION)
    env.makepyfile(test_x="def test_x(loader_cls):\n    assert loader_cls.__name__ == 'Loader'\n")
    result = env.runpytest_subprocess(f"{loader_ref.OPTION}=fakeloader:Loader", "--loader=theirs")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"*loader fakeloader:Loader (from {loader_ref.SOURCE_OPTION}: named on the command line)*"]
    )


LEAKY_CASE = """
import pytest

@pytest.mark.spec_property("NoStaleEpochDelivery", "ExactlyOnce")
def test_leaks(grade):
    grade.fail("ShutdownCompletes", "nothing left", "threads: leaked-reader")

@pytest.mark.spec_property("NoStaleEpochDelivery", "PromptFaultHandling")
def test_fresh_but_slow(grade):
    grade.non_strict("PromptFaultHandling", 2.0, "took 2 s")

@pytest.mark.spec_property("NoStaleEpochDelivery")
def test_own_setup_fails():
    pytest.fail("setup: the workers never started", pytrace=False)
"""


def test_an_outcome_is_counted_under_the_property_that_failed(env: pytest.Pytester) -> None:
    """A leaky loader failing a NoStaleEpochDelivery case's leak check: report.json, the report,
    JUnit and the matrix's by-property summary count ShutdownCompletes, not the case's marker."""
    from loaderspec.conformance.harness.matrix import matrix, matrix_markdown

    env.makepyfile(test_x=LEAKY_CASE)
    rep = env.path / "rep"
    junit = env.path / "junit.xml"
    result = env.runpytest_subprocess(
        "--loader=fakeloader:Loader", f"--conformance-report={rep}", f"--junitxml={junit}"
    )
    # Under each FAIL: the command that runs it again (this interpreter's pytest, pytest's
    # node id, the same loader).
    result.stdout.fnmatch_lines(
        ["FAIL test_x::test_leaks:*", f"  rerun: {sys.executable} -m pytest test_x.py::test_leaks "
         f"{loader_ref.OPTION}=fakeloader:Loader"]
    )  # fmt: skip
    results = json.loads((rep / "report.json").read_text())
    got = {c["case"]: c["failed_properties"] for c in results["cases"]}
    assert got == {
        "test_leaks": ["ShutdownCompletes"],
        "test_fresh_but_slow": ["PromptFaultHandling"],
        "test_own_setup_fails": ["NoStaleEpochDelivery"],  # no check named one: its marker
    }
    assert (
        "ShutdownCompletes failed (checks NoStaleEpochDelivery, ExactlyOnce)"
        in (rep / "report.md").read_text()
    )
    xml = junit.read_text()
    assert '<property name="loaderspec_properties" value="ShutdownCompletes" />' in xml
    # JUnit names each case by its stable id, not by the folders pytest ran it from.
    assert 'classname="loaderspec.conformance.test_x" name="test_leaks"' in xml
    by_property = {
        p["property"]: p["by_loader"]["fakeloader:Loader"]
        for p in matrix({"fakeloader:Loader": results})["properties"]
    }
    assert by_property["ShutdownCompletes"]["FAIL"] == 1
    assert by_property["NoStaleEpochDelivery"]["FAIL"] == 1  # only the case's own setup
    assert by_property["PromptFaultHandling"]["NON-STRICT"] == 1
    assert "| ShutdownCompletes | MUST | 1 FAIL |" in matrix_markdown(
        matrix({"fakeloader:Loader": results})
    )


UNBUILDABLE = """
class Loader:
    def __init__(self, dataset, **kwargs):
        raise RuntimeError("no accelerator found")
"""


def test_a_loader_that_cannot_be_built_stops_the_run_with_one_error(env: pytest.Pytester) -> None:
    """Its constructor raises: one usage error naming the exception and the line that raised
    it, instead of a FAIL per case."""
    env.makepyfile(unbuildable=UNBUILDABLE, test_x="def test_x(loader_cls):\n    pass\n")
    result = env.runpytest_subprocess("--loader=unbuildable:Loader")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    assert "cannot be built: RuntimeError: no accelerator found" in err
    assert "unbuildable.py:3, in __init__" in err  # where the constructor raised


def test_a_module_named_as_the_loader_is_answered_with_its_classes(
    env: pytest.Pytester,
) -> None:
    env.mkpydir("mypkg")
    (env.path / "mypkg" / "loader.py").write_text("class MyLoader:\n    pass\n")
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess("--loader=mypkg.loader")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    assert "names a module, not a class in it" in err
    assert "'mypkg.loader:Class' (classes defined there: MyLoader)" in err


STARTING_LOADERS = """
class Slow:
    loaderspec_iterator_start_s = 2.5

    def __init__(self, dataset, **kwargs):
        self.dataset = dataset


class Plain(Slow):
    loaderspec_iterator_start_s = 0
"""

# Each case prints the limit pytest-timeout reads for it (its closest `timeout` marker).
CASES_WITH_ITERATORS = """
import pytest


def _limit(request):
    mark = request.node.get_closest_marker("timeout")
    limit = None if mark is None else (mark.args or [mark.kwargs.get("timeout")])[0]
    print("LIMIT", request.node.name, limit)


@pytest.mark.iterators(4)
@pytest.mark.spec_property("ResumeEquivalence")
def test_four(request, grade):
    _limit(request)


@pytest.mark.iterators(4)
@pytest.mark.timeout(50)
@pytest.mark.spec_property("ResumeEquivalence")
def test_four_own_limit(request, grade):
    _limit(request)


@pytest.mark.spec_property("ExactlyOnce")
def test_undeclared(request, grade):
    _limit(request)
"""


@pytest.mark.parametrize(
    ("loader", "limits"),
    [
        ("Slow", {"test_four": 20.0, "test_four_own_limit": 60.0, "test_undeclared": None}),
        # nightly: the test command is over-full, and this run only shows that nothing is added
        pytest.param(
            "Plain",
            {"test_four": None, "test_four_own_limit": 50, "test_undeclared": None},
            marks=pytest.mark.nightly,
        ),
    ],
)
def test_a_declared_start_raises_the_timeout_of_the_cases_that_start_iterators(
    pytester: pytest.Pytester, loader: str, limits: dict[str, float | None]
) -> None:
    """A loader declaring `loaderspec_iterator_start_s` (2.5 s) gets n x 2.5 s more than the
    pytest-timeout limit (here --timeout=10, or the case's own) for a case marked
    `iterators(n)`, so that a slow start is graded by the case's own deadlines, not cut off; a
    loader that declares nothing, and an unmarked case, keep their limits exactly. In-process:
    no interpreter to start."""
    pytester.syspathinsert()
    pytester.makepyfile(starting=STARTING_LOADERS, test_x=CASES_WITH_ITERATORS)
    result = pytester.runpytest_inprocess(
        f"--loader=starting:{loader}", "--timeout=10", "-s", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3)
    got = dict(re.findall(r"LIMIT (\S+) (\S+)", result.stdout.str()))
    assert got == {name: str(limit) for name, limit in limits.items()}


@pytest.mark.nightly  # the test command is over-full
def test_a_malformed_iterators_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    pytester.makepyfile(
        starting=STARTING_LOADERS,
        test_x='import pytest\n\n@pytest.mark.iterators("4")\ndef test_x():\n    pass\n',
    )
    result = pytester.runpytest_inprocess("--loader=starting:Slow", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is marked iterators('4'); it takes one whole number" in result.stderr.str()


def test_a_plan_past_the_declared_iterators_is_refused_before_it_plays() -> None:
    """The resume cases declare `MOST_ITERATORS` per plan (their `iterators` marker): a plan that
    makes more `iter()` calls is a case author's error, raised before anything starts."""
    from loaderspec.conformance.harness.resume import MOST_ITERATORS, Cut, ResumePlan, play_resume
    from torch.utils.data import DataLoader

    plan = ResumePlan(epochs=3, cuts=(Cut(0, 1), Cut(0, 1), Cut(0, 1)))
    assert plan.iterators == MOST_ITERATORS + 1
    with pytest.raises(ValueError, match="MOST_ITERATORS=8 per plan"):
        play_resume(DataLoader, plan)


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_report_path_that_cannot_be_a_directory_is_a_usage_error(
    env: pytest.Pytester, where: str
) -> None:
    (env.path / "taken").write_text("")
    target = env.path / "taken" if where == "a file" else env.path / "taken" / "sub"
    env.makepyfile(test_x="def test_x():\n    pass\n")
    result = env.runpytest_subprocess(f"--conformance-report={target}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("ERROR:") == 1
    assert f"--conformance-report={target}" in err
    assert "INTERNALERROR" not in result.stdout.str() + err


def test_a_marker_expression_that_selects_nothing_gets_a_hint(env: pytest.Pytester) -> None:
    env.makepyfile(test_x="import pytest\n\n@pytest.mark.quick\ndef test_x():\n    pass\n")
    result = env.runpytest_subprocess("--conformance-report", str(env.path / "rep"), "-m", "quik")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            "*-m 'quik' selected none of the 1 cases: "
            "'quik' is no marker here (did you mean 'quick'?)*"
        ]
    )


DRAWN_CASE = """
from hypothesis import strategies as st
from loaderspec.conformance.harness.drawn import check_drawn

def test_x(loader_cls):
    check_drawn(st.lists(st.integers(), min_size=5), lambda n: None, examples=40)
"""


def test_hypothesis_keeps_its_files_out_of_the_users_project(
    env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypothesis caches the constants of the project's own modules (``.hypothesis/constants``,
    once enough draws took one) in its home, ``.hypothesis/`` where pytest started."""
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    env.makepyfile(test_x=DRAWN_CASE)
    result = env.runpytest_subprocess("--loader=fakeloader:Loader")
    result.assert_outcomes(passed=1)
    assert not (env.path / ".hypothesis").exists()


STOPPED_RUN = """
import os, signal, subprocess, sys
import pytest
from loaderspec.faultinject import sandbox

def hold(pids_file):
    # the sandbox child starts a worker of its own, notes both, then stops the harness
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(pids_file, "w") as f:
        f.write(f"{{os.getpid()}} {{worker.pid}}")
    {stop}
    worker.wait()

@pytest.mark.spec_property("ExactlyOnce")
def test_a():
    pass

@pytest.mark.spec_property("ExactlyOnce")
def test_b(tmp_path_factory):
    sandbox.run(hold, {pids!r}, deadline_s=120)
    pytest.fail("the run was not stopped")

@pytest.mark.spec_property("ExactlyOnce")
def test_c():
    pass
"""


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_stopped_run_kills_the_cases_processes_and_reports_what_it_finished(
    env: pytest.Pytester, signal_name: str
) -> None:
    """Ctrl-C (SIGINT) or CI's SIGTERM in the middle of a case: the case's sandbox child and the
    worker it started are gone when pytest exits, and report.json says the run is incomplete,
    why, and which cases finished (it said complete: true after a Ctrl-C, and a SIGTERM left
    the processes alive and no final report)."""
    import psutil

    pids = env.path / "pids"
    stop = f"os.kill(os.getppid(), signal.{signal_name})"
    env.makepyfile(test_x=STOPPED_RUN.format(stop=stop, pids=str(pids)))
    rep = env.path / "rep"
    result = env.runpytest_subprocess("--loader=fakeloader:Loader", f"--conformance-report={rep}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    left = [int(p) for p in pids.read_text().split()]
    assert [p for p in left if psutil.pid_exists(p) and not _zombie(p)] == []
    data = json.loads((rep / "report.json").read_text())
    assert data["complete"] is False
    assert (data["finished"], data["selected"]) == (1, 3)
    assert [c["case"] for c in data["cases"]] == ["test_a"]
    assert signal_name in data["stopped"]
    assert "after 1 of 3 cases" in (rep / "report.md").read_text()


def _zombie(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


DRAWN_FAILURES = """
import pytest
from hypothesis import strategies as st
from loaderspec.conformance.harness.drawn import check_drawn

LONG = "x" * 500

@pytest.mark.spec_property("ExactlyOnce")
def test_worker_segfaults(grade):
    from loaderspec.conformance.harness import scenario
    from loaderspec.faultinject.driver import Plan, Run
    from loaderspec.faultinject.events import Error

    segv = "RuntimeError: DataLoader worker (pid 4) is killed by signal: Segmentation fault."
    scenario._PLAYED.append(Run(Plan(), None, events=[Error(0, 1.0, 0.0, text=segv)]))
    grade.fail("ExactlyOnce", "len 4 and 4 batches", "len 4, 0 batches")

@pytest.mark.spec_property("NoSilentLoss")
def test_always(grade):
    def body(draw):
        if draw[0] >= 3:
            grade.fail("NoSilentLoss", "every item", f"{LONG} items [{draw[0]}] never handed out")
    check_drawn(st.tuples(st.integers(0, 9), st.integers(0, 9)), body, examples=20, shrink_s=0)
"""


def test_a_drawn_fail_shows_the_draw_the_observation_and_whether_a_replay_reproduced_it(
    env: pytest.Pytester,
) -> None:
    """A broken loader's draw that always fails: its FAIL names the lost item and the draw; a
    FAIL a worker's death caused carries the loader's error; the summary keeps the end of a long
    detail after an ellipsis; the rerun line is this interpreter's pytest with the run's
    conformance options, and the replay line plays that draw alone and fails again."""
    import sys

    from loaderspec.conformance.harness.drawn import MSG_REPLAYED

    env.makepyfile(test_x=DRAWN_FAILURES)
    expect_file = env.path / "expect.toml"
    expect_file.write_text("[cases]\n")
    rep = env.path / "rep"
    result = env.runpytest_subprocess(
        "--loader=fakeloader:Loader",
        f"--conformance-report={rep}",
        f"--conformance-expect={expect_file}",
    )
    cases = {c["case"]: c for c in json.loads((rep / "report.json").read_text())["cases"]}
    always = cases["test_always"]
    assert always["outcome"] == "FAIL"
    assert re.search(r"items \[(\d)\] never handed out; drawn: \(\1, \d\)$", always["detail"])
    assert "reproduced" not in always["detail"]
    assert cases["test_worker_segfaults"]["detail"].endswith(
        "len 4, 0 batches; the loader raised: RuntimeError: DataLoader worker (pid 4) is killed"
        " by signal: Segmentation fault."
    )
    out = result.stdout.str()
    assert re.search(r"FAIL test_x::test_always: .* … .*items \[\d\] never handed out", out)
    rerun = f"rerun: {sys.executable} -m pytest test_x.py::test_always"
    assert rerun in out
    assert f"--conformance-expect={expect_file}" in out
    replay = next(line for line in out.splitlines() if line.startswith("  replay: "))
    assert f"--conformance-replay-draw={always['draw']}" in replay
    again = env.run(*shlex.split(replay.removeprefix("  replay: ")))
    again_out = again.stdout.str()
    assert again.ret == pytest.ExitCode.TESTS_FAILED, again_out
    assert re.search(r"1 failed", again_out)
    drawn = re.search(r"drawn: \(\d, \d\)", always["detail"])
    assert drawn is not None
    assert drawn.group(0) in again_out
    assert MSG_REPLAYED in again_out


DELAYED_ONCE = """
import os
import pytest
from hypothesis import strategies as st
from loaderspec.conformance.harness.drawn import check_drawn, played
from loaderspec.conformance.harness.scenario import kwargs, play
from loaderspec.faultinject.driver import Plan
from loaderspec.faultinject.faults import Sleep

N = 4

@pytest.mark.spec_property("NoSilentLoss")
def test_delayed_once(loader_cls, grade):
    def body(at):
        with open(os.environ["DRAWS_PLAYED"], "a") as f:
            f.write(f"{at}\\n")
        # The first fetch of item `at` in this directory's life takes 3 s (a loaded machine),
        # past the loader's timeout of 1 s; every later play of it is quick.
        plan = Plan(
            n=N,
            faults=(Sleep(at, 3.0, once=True),),
            once_dir=os.environ["DELAY_ONCE_DIR"],
            stop_at_fatal=True,
            kwargs=kwargs(1, 1, batch_size=1, timeout=1.0),
        )
        r = played(play(loader_cls, plan, leaks=False, skip_refused=False))
        lost = sorted(set(range(N)) - set(r.items(0)))
        if lost:
            grade.fail("NoSilentLoss", "every item handed out", f"items {lost} never handed out")
    check_drawn(st.integers(0, N - 1), body, examples=2, shrink_s=0)
"""


def test_a_correct_loaders_draw_delayed_once_is_reported_as_not_reproduced(
    env: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference loader (correct) plays a drawn case whose first play of its draw gets a
    3 s delay injected once (a once-only `Sleep`, its marker kept across plays) past its
    1 s timeout: the loader raises its timeout error and items are lost; every replay is
    quick and passes. The FAIL shows the draw, the observation (the lost items, the loader's
    timeout error) and "not reproduced on replay" (it read `_WrappedBaseException() [single
    exception in FlakyFailure]`); its replay line plays that one draw again, alone."""
    from loaderspec.conformance.harness.drawn import MSG_NOT_REPRODUCED, REPLAYS

    played = env.path / "played"
    monkeypatch.setenv("DRAWS_PLAYED", str(played))
    monkeypatch.setenv("DELAY_ONCE_DIR", str(env.path / "once"))
    env.makepyfile(test_d=DELAYED_ONCE)
    rep = env.path / "rep"
    result = env.runpytest_subprocess(
        "--loader=loaderspec.reference:DataLoader", f"--conformance-report={rep}"
    )
    out = result.stdout.str()
    (case,) = json.loads((rep / "report.json").read_text())["cases"]
    assert (case["outcome"], case["failed_properties"]) == ("FAIL", ["NoSilentLoss"]), out
    first = played.read_text().split()
    assert re.search(rf"items \[{first[0]}.*\] never handed out", case["detail"])
    assert f"drawn: {first[0]}" in case["detail"]
    assert "timed out" in case["detail"]  # the loader's own error, under the delay
    assert MSG_NOT_REPRODUCED.format(n=REPLAYS) in case["detail"]
    assert "FlakyFailure" not in case["detail"]
    replay = next(line for line in out.splitlines() if line.startswith("  replay: "))
    played.write_text("")
    again = env.run(*shlex.split(replay.removeprefix("  replay: ")))
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    assert played.read_text().split() == [first[0]]  # that draw, alone


@pytest.mark.parametrize("kind", ["not a draw", "another case's draw"])
def test_a_replay_draw_that_cannot_be_played_is_a_usage_error(
    env: pytest.Pytester, kind: str
) -> None:
    """`--conformance-replay-draw` with text that is not a recorded draw, or with the draw of a
    case that is not selected: one line naming the fix, no case run."""
    from loaderspec.conformance.harness import draws

    env.makepyfile(test_x=GRADED)
    value = "abc!" if kind == "not a draw" else draws.encode("test_y::test_gone", 3)
    result = env.runpytest_subprocess(
        "--loader=fakeloader:Loader", f"--conformance-replay-draw={value}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (
        "not a draw this suite recorded" if kind == "not a draw" else "test_y::test_gone"
    ) in err
    assert "Traceback" not in err


HANGS_AT_ITER = """
import threading
import pytest
from loaderspec.conformance.harness.scenario import kwargs, play

class Loader:
    def __init__(self, dataset, **kwargs):
        self.dataset = dataset

    def __iter__(self):
        threading.Event().wait()  # never returns

@pytest.mark.spec_property("IterationTerminates")
@pytest.mark.parametrize("k", range(4))
def test_epoch(loader_cls, k):
    play(loader_cls, n=2 + k, kwargs=kwargs(0, batch_size=1), deadline_s=4.0)
"""


def test_a_loader_hanging_at_iter_is_graded_in_seconds_after_two_cases_and_named_once(
    env: pytest.Pytester,
) -> None:
    """A loader whose iter() never returns: the first two cases wait out their deadline (4 s),
    the later ones get the short one and say why; the summary names the cause once."""
    from loaderspec.conformance.harness import scenario

    env.makepyfile(test_h=HANGS_AT_ITER)
    rep = env.path / "rep"
    result = env.runpytest_subprocess("--loader=test_h:Loader", f"--conformance-report={rep}")
    out = result.stdout.str()
    cases = sorted(json.loads((rep / "report.json").read_text())["cases"], key=lambda c: c["id"])
    assert [c["outcome"] for c in cases] == ["FAIL"] * 4, out
    assert [scenario.HUNG_PATTERN in c["detail"] for c in cases] == [False, False, True, True]
    assert all(c["duration_s"] < 4.0 for c in cases[2:]), [c["duration_s"] for c in cases]
    assert "test_h.py::test_epoch[0] and test_h.py::test_epoch[1]" in cases[2]["detail"]
    cause = (
        "one cause, 2 more FAILs graded in seconds each: the loader hangs before its first batch"
    )
    assert out.count(cause) == 1, out
