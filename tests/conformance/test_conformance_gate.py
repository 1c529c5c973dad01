"""The suite as a CI gate: expectation files, the exit policy, JUnit XML, a run that graded
nothing, and repeated runs. Real cases of the suite run against broken loaders from
``tests/conformance/broken/`` (``wrong_len``: FAIL of the two ``len()`` cases;
``slow_death_report``: NON-STRICT), in pytest subprocesses, as a user's CI would run them."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conformance_runner import ROOT, run_suite
from loaderspec.conformance import expect, loader_ref, verdict
from loaderspec.conformance.harness.grading import FAIL, NON_STRICT, PASS, SKIP

pytest_plugins = ["pytester"]

LEN_SEL = "conformance/cases/test_exactly_once.py::test_len_matches_the_batches_handed_out"
LEN = "test_exactly_once::test_len_matches_the_batches_handed_out"
PROMPT_SEL = "conformance/cases/test_prompt_fault_handling.py"
PROMPT = "test_prompt_fault_handling::test_death_is_reported_promptly_while_next_waits"
WRONG_LEN = "broken.wrong_len:Loader"
SLOW_DEATH = "broken.slow_death_report:Loader"
TIMEOUT_S = 300


def _toml(path: Path, entries: dict[str, tuple[str, str]]) -> Path:
    lines = []
    for cid, (outcome, reason) in entries.items():
        lines += [f'[cases."{cid}"]', f'outcome = "{outcome}"', f'reason = "{reason}"', ""]
    path.write_text("\n".join(lines))
    return path


def _by_id(results: dict) -> dict[str, dict]:
    return {c["id"]: c for c in results["cases"]}


# --------------------------------------------------------------------------- pure parts


def test_status_compares_by_badness() -> None:
    exp = expect.Expectations(
        "f",
        (
            expect.Expectation("a", LEN, FAIL, "r"),
            expect.Expectation("b", PROMPT, NON_STRICT, "r"),
        ),
        (),
    )
    assert exp.status(f"{LEN}[drop_last=True]", FAIL) == expect.EXPECTED  # a function's entry
    assert exp.status(f"{LEN}[drop_last=True]", PASS) == expect.FIXED
    assert exp.status(PROMPT, FAIL) == expect.REGRESSION
    assert exp.status(PROMPT, PASS) == expect.FIXED
    assert exp.status(PROMPT, SKIP) is None
    assert exp.status("test_x::test_y", FAIL) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[cases."test_exactly_once::test_len_matches"]\noutcome="FAIL"\nreason="r"\n', "nearest"),
        (f'[cases."{LEN}"]\noutcome="BROKEN"\nreason="r"\n', "is not one of FAIL"),
        (f'[cases."{LEN}"]\noutcome="FAIL"\n', "give a reason"),
        ('cases = "x"\n', 'expected a table "cases"'),
        ("[cases\n", "not valid TOML"),
        (f'[cases."{LEN}"]\noutcome="FAIL"\nreason="r"\nreasn="typo"\n', "unknown key.*'reasn'"),
    ],
)
def test_bad_expectation_files_are_rejected_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "expect.toml"
    path.write_text(text)
    with pytest.raises(expect.ExpectationError, match=message) as raised:
        expect.load(path)
    assert str(path) in str(raised.value)


def test_an_expectation_file_that_is_not_utf8_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "expect.toml"
    path.write_bytes(f'[cases."{LEN}"]\noutcome="FAIL"\nreason="caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(expect.ExpectationError, match="not UTF-8") as raised:
        expect.load(path)
    assert str(path) in str(raised.value)


def test_json_files_and_old_ids_are_accepted_with_a_warning(tmp_path: Path) -> None:
    old = "conformance/cases/test_exactly_once.py::test_len_matches_the_batches_handed_out[True]"
    path = tmp_path / "expect.json"
    path.write_text(json.dumps({"cases": {old: {"outcome": "FAIL", "reason": "r"}}}))
    loaded = expect.load(path)
    assert [e.id for e in loaded.entries] == [f"{LEN}[drop_last=True]"]
    assert "old id" in loaded.warnings[0]


@pytest.mark.parametrize(
    ("policy", "outcome", "failed"),
    [
        ("must", FAIL, True),
        ("must", NON_STRICT, False),
        ("should", NON_STRICT, True),
        ("never", FAIL, False),
    ],
)
def test_policy(policy: str, outcome: str, failed: bool) -> None:
    cases = [{"id": "a", "outcome": PASS}, {"id": "b", "outcome": outcome}]
    assert verdict.verdict(cases, policy).failed is failed
    cases[1]["expectation"] = expect.EXPECTED
    assert verdict.verdict(cases, policy).failed is False


def test_a_run_of_skips_only_fails_under_every_policy() -> None:
    cases = [{"id": "a", "outcome": SKIP, "detail": "no workers here"}]
    for policy in ("must", "should", "never"):
        result = verdict.verdict(cases, policy)
        assert result.failed
        assert "graded nothing" in result.reasons[0]
        assert "no workers here" in result.reasons[0]


# --------------------------------------------------------------------------- real runs


@pytest.mark.slow
def test_an_expected_fail_passes_the_run_and_a_regression_fails_it(tmp_path: Path) -> None:
    file = _toml(tmp_path / "expect.toml", {f"{LEN}[drop_last=False]": (FAIL, "mypkg#1")})
    code, out, results = run_suite(
        [LEN_SEL], WRONG_LEN, tmp_path / "rep", TIMEOUT_S, f"--conformance-expect={file}"
    )
    assert results is not None, out[-3000:]
    cases = _by_id(results)
    assert cases[f"{LEN}[drop_last=False]"]["expectation"] == expect.EXPECTED
    assert cases[f"{LEN}[drop_last=True]"]["outcome"] == FAIL
    assert "expectation" not in cases[f"{LEN}[drop_last=True]"]
    assert code == 1, out[-3000:]
    assert "1 failed" in out
    assert "1 xfailed" in out
    assert results["verdict"]["failed"] is True
    assert "1 unexpected FAIL" in results["verdict"]["reasons"][0]

    # The whole function expected to FAIL: the run passes, with both FAILs in the report.
    file = _toml(tmp_path / "expect2.toml", {LEN: (FAIL, "mypkg#1")})
    code, out, results = run_suite(
        [LEN_SEL], WRONG_LEN, tmp_path / "rep2", TIMEOUT_S, f"--conformance-expect={file}"
    )
    assert code == 0, out[-3000:]
    assert results is not None
    assert {c["outcome"] for c in results["cases"]} == {FAIL}
    assert "2 xfailed" in out


@pytest.mark.slow
def test_an_unexpected_pass_is_fixed_and_junit_carries_the_grades(tmp_path: Path) -> None:
    file = _toml(tmp_path / "expect.toml", {f"{LEN}[drop_last=True]": (FAIL, "mypkg#1")})
    xml = tmp_path / "junit.xml"
    code, out, results = run_suite(
        [LEN_SEL],
        "loaderspec.reference:DataLoader",
        tmp_path / "rep",
        TIMEOUT_S,
        f"--conformance-expect={file}",
        f"--junitxml={xml}",
    )
    assert code == 0, out[-3000:]
    assert results is not None
    assert _by_id(results)[f"{LEN}[drop_last=True]"]["expectation"] == expect.FIXED
    assert f"PASS {LEN}[drop_last=True] [FIXED (expected FAIL" in out
    assert "1 xpassed" in out
    props = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        got = {p.get("name"): p.get("value") for p in case.iter("property")}
        props[got["loaderspec_id"]] = got
    assert props[f"{LEN}[drop_last=False]"]["loaderspec_grade"] == PASS
    assert props[f"{LEN}[drop_last=False]"]["loaderspec_properties"] == "ExactlyOnce"
    assert props[f"{LEN}[drop_last=False]"]["loaderspec_level"] == "MUST"
    assert props[f"{LEN}[drop_last=True]"]["loaderspec_expected"] == "FAIL: mypkg#1"


POLICY_RUNS = (  # (policy, loader, cases, exit status)
    ("must", WRONG_LEN, LEN_SEL, 1),
    ("never", WRONG_LEN, LEN_SEL, 0),
    ("must", SLOW_DEATH, PROMPT_SEL, 0),
    ("should", SLOW_DEATH, PROMPT_SEL, 1),
)


@pytest.mark.slow
def test_each_exit_policy(tmp_path: Path) -> None:
    """A FAIL fails the run under must, not under never; a NON-STRICT fails it under should,
    not under must (the runs go side by side: they mostly wait on starting interpreters)."""
    with concurrent.futures.ThreadPoolExecutor(len(POLICY_RUNS)) as pool:
        runs = [
            pool.submit(
                run_suite, [sel], loader, tmp_path / str(i), TIMEOUT_S, f"--conformance-fail-on={p}"
            )
            for i, (p, loader, sel, _) in enumerate(POLICY_RUNS)
        ]
        done = [r.result() for r in runs]
    for (policy, loader, _, code), (got, out, results) in zip(POLICY_RUNS, done, strict=True):
        assert got == code, f"{policy} {loader}:\n{out[-3000:]}"
        assert results is not None
        assert results["policy"] == policy
        state = "FAILED" if code else "passed"
        assert f"verdict (--conformance-fail-on={policy}): {state}" in out
        if loader == SLOW_DEATH:  # NON-STRICT and its figure, in the terminal summary
            assert f"{NON_STRICT} {PROMPT}: PromptFaultHandling" in out
            assert "death_reported_s=2" in out
            assert "1 non-strict" in out


@pytest.mark.slow
def test_a_bad_expectation_file_is_a_usage_error(tmp_path: Path) -> None:
    file = _toml(tmp_path / "expect.toml", {"test_exactly_once::test_len": (FAIL, "r")})
    code, out, results = run_suite(
        [LEN_SEL], WRONG_LEN, tmp_path / "rep", TIMEOUT_S, f"--conformance-expect={file}"
    )
    assert code == pytest.ExitCode.USAGE_ERROR
    assert out.count("ERROR:") == 1
    assert "names no case of the suite" in out
    assert f"nearest: '{LEN}" in out
    assert results is None


# --------------------------------------------------------------------------- fake cases

FAKE_LOADER = "class Loader:\n    def __init__(self, dataset, **kwargs):\n        pass\n"

RACY_CASE = """
import pytest
from pathlib import Path

@pytest.mark.spec_property("ExactlyOnce")
def test_racy(grade):
    runs = Path("runs.txt")
    n = int(runs.read_text()) if runs.exists() else 0
    runs.write_text(str(n + 1))
    if n == 1:
        grade.fail("ExactlyOnce", "every batch once", "batch 3 twice")

@pytest.mark.spec_property("ExactlyOnce")
def test_steady(grade):
    grade.figure("x_s", 0.25)
"""


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester dir with a loader module beside the user (no PYTHONPATH: the directory pytest
    starts in is importable for --loader)."""
    for name in ("LOADERSPEC_LOADER", "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(fakeloader=FAKE_LOADER)
    return pytester


def test_repeat_grades_the_worst_run_and_shows_a_racy_case(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_cases=RACY_CASE)
    xml = fake.path / "junit.xml"
    result = fake.runpytest_subprocess(
        "--loader=fakeloader:Loader",
        "--conformance-repeat=3",
        f"--conformance-report={fake.path / 'rep'}",
        f"--junitxml={xml}",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1, passed=1)
    cases = _by_id(json.loads((fake.path / "rep" / "report.json").read_text()))
    racy = cases["test_cases::test_racy"]
    assert racy["outcome"] == FAIL
    assert racy["runs"] == {"n": 3, "failed": 1, "outcomes": {FAIL: 1, PASS: 2}}
    assert cases["test_cases::test_steady"]["runs"]["outcomes"] == {PASS: 3}
    result.stdout.fnmatch_lines(["*FAIL test_cases::test_racy [[]RACY: 3 runs: FAIL 1, PASS 2]*"])
    assert "loaderspec_runs" in xml.read_text()


def test_a_run_that_graded_nothing_fails(fake: pytest.Pytester) -> None:
    fake.makepyfile(
        test_cases=textwrap.dedent(
            """
            import pytest

            @pytest.mark.spec_property("ExactlyOnce")
            def test_x():
                pytest.skip("the loader refused the configuration: no workers")
            """
        )
    )
    result = fake.runpytest_subprocess("--loader=fakeloader:Loader", "--conformance-fail-on=never")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*the run graded nothing: all 1 cases were SKIP*no workers*"])


def test_a_misspelled_variable_does_not_silently_test_the_reference(
    fake: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.makepyfile(test_cases=RACY_CASE)
    monkeypatch.setenv("LOADERSPEC_LOADR", "fakeloader:Loader")
    result = fake.runpytest_subprocess("test_cases.py", "--conformance-fail-on=never")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "LOADERSPEC_LOADR is not one loaderspec reads (did you mean LOADERSPEC_LOADER?)" in err
    # With the loader named, the run goes on and the header warns.
    result = fake.runpytest_subprocess("--loader=fakeloader:Loader", "-k", "steady")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*warning: environment variable LOADERSPEC_LOADR is not one*"])


def test_a_run_that_fails_to_start_leaves_no_earlier_report(fake: pytest.Pytester) -> None:
    rep = fake.path / "rep"
    rep.mkdir()
    for name in ("report.json", "report.md", "report.html"):
        (rep / name).write_text("{}")
    fake.makepyfile(test_cases="def test_x():\n    pass\n")
    result = fake.runpytest_subprocess("--loader=fakeloader:Nothing", f"--conformance-report={rep}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert list(rep.iterdir()) == []


@pytest.mark.nightly
def test_xdist_runs_real_cases_to_the_same_report(tmp_path: Path) -> None:
    selectors = ["conformance/cases/test_exactly_once.py", "-k", "len_matches or start_method"]
    got = {}
    for name, extra in (("plain", []), ("xdist", ["-n", "2"])):
        code, out, results = run_suite(
            selectors, "loaderspec.reference:DataLoader", tmp_path / name, TIMEOUT_S, *extra
        )
        assert code == 0, out[-3000:]
        assert results is not None
        got[name] = {c["id"]: c["outcome"] for c in results["cases"]}
    assert len(got["plain"]) == 5
    assert got["xdist"] == got["plain"]


def test_every_loaderspec_variable_of_the_tree_is_known() -> None:
    """The misspelling check knows every LOADERSPEC_* variable loaderspec reads."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.sh", "*.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    named = {
        m for f in files for m in re.findall(r"\bLOADERSPEC_[A-Z_]*[A-Z]", (ROOT / f).read_text())
    }
    assert named - {"LOADERSPEC_LOADR"} <= loader_ref.KNOWN_ENV


def test_the_directory_pytest_starts_in_is_importable_for_the_loader(tmp_path: Path) -> None:
    """`pytest` (the console script: no current directory on sys.path) from the user's own
    directory finds the loader module there."""
    (tmp_path / "fakeloader.py").write_text(FAKE_LOADER)
    (tmp_path / "test_cases.py").write_text(RACY_CASE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERSPEC_LOADER")}
    pytest_script = str(Path(sys.executable).parent / "pytest")
    args = ["-p", "no:cacheprovider", "-k", "steady", "--loader=fakeloader:Loader", "test_cases.py"]
    done = subprocess.run(
        [pytest_script, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
