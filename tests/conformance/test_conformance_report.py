"""`loaderspec report`'s matrix from per-loader results (the suite's one renderer), its exit
status, and the rule that a run which fails to start shows no earlier results (the suite runs
themselves are covered elsewhere)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from loaderspec.conformance.catalog import issue_segments
from loaderspec.conformance.harness import matrix
from loaderspec.conformance.harness.matrix import write_matrix

from loaderspec import report

WIDTH = 1024


def _case(cid: str, outcome: str, level: str = "MUST", **extra: object) -> dict:
    return {
        "id": cid,
        "file": f"conformance/cases/{cid.split('::')[0]}.py",
        "case": cid.split("::")[1],
        "properties": ["ShutdownCompletes"],
        "level": level,
        "outcome": outcome,
        "figures": [],
        "detail": "",
        "duration_s": 0.1,
        **extra,
    }


def test_loaders_sorted_by_must_failures_each_non_pass_explained(tmp_path: Path) -> None:
    fig = [{"name": "shutdown_s", "value": 5.02, "unit": "s"}]
    results = {
        "a:L": {
            "cases": [
                _case("test_shutdown_completes::x", "PASS"),
                _case(
                    "test_shutdown_completes::y",
                    "FAIL",
                    detail="ShutdownCompletes (MUST): expected nothing left; actual 2 workers",
                    guards="A2 pytorch/pytorch#39570",
                ),
            ]
        },
        "b:L": {
            "cases": [
                _case(
                    "test_shutdown_completes::x",
                    "NON-STRICT",
                    figures=fig,
                    detail="PromptFaultHandling: shutdown took 5.02 s",
                    guards="A1 pytorch/pytorch#81794",
                )
            ]
        },
        "c:L": None,
    }
    md = write_matrix(tmp_path, results)
    data = json.loads((tmp_path / "matrix.json").read_text())
    assert data["loaders"] == ["b:L", "c:L", "a:L"]  # 0, 0, 1 MUST failures (ties keep order)
    assert data["incomplete"] == ["c:L"]  # it produced no results at all
    assert "| `test_shutdown_completes::x` | MUST | N-S [1] | - | PASS |" in md
    assert "| `test_shutdown_completes::y` | MUST | - | - | FAIL [2] |" in md
    assert "| ShutdownCompletes | MUST | 1 N-S | - | 1 PASS 1 FAIL |" in md
    assert "| **MUST failures** | | 0 | 0 | 1 |" in md
    assert (
        "1. `b` `test_shutdown_completes::x`: NON-STRICT: PromptFaultHandling: shutdown took"
        " 5.02 s. Guards against: A1 [pytorch/pytorch#81794]"
        "(https://github.com/pytorch/pytorch/issues/81794)" in md
    )
    assert "2. `a` `test_shutdown_completes::y`: FAIL: ShutdownCompletes (MUST)" in md
    page = (tmp_path / "matrix.html").read_text()
    assert '<li id="n2">' in page
    assert '<a href="https://github.com/pytorch/pytorch/issues/39570">' in page


@pytest.mark.parametrize(
    ("line", "urls"),
    [
        ("D2 pytorch/pytorch#33413 (x)", ["pytorch/pytorch/issues/33413"]),
        ("D4 pytorch PR #19228.", ["pytorch/pytorch/pull/19228"]),
        (
            "A7 pytorch/pytorch#27278, #16608",
            ["pytorch/pytorch/issues/27278", "pytorch/pytorch/issues/16608"],
        ),
        (
            "A2 pytorch/pytorch#39570 -> PR #39869",
            ["pytorch/pytorch/issues/39570", "pytorch/pytorch/pull/39869"],
        ),
        (
            "H4 pytorch#22585, Paddle#1",
            ["pytorch/pytorch/issues/22585", "PaddlePaddle/Paddle/issues/1"],
        ),
        ("C2 GaTech-RL2/EgoVerse#682", ["GaTech-RL2/EgoVerse/issues/682"]),
        ("E1 (design discussion, no number)", []),
    ],
)
def test_every_issue_a_guards_line_names_becomes_a_link(line: str, urls: list[str]) -> None:
    pieces = issue_segments(line)
    assert "".join(text for text, _ in pieces) == line  # nothing dropped or added
    assert [u.removeprefix("https://github.com/") for _, u in pieces if u] == urls


def test_a_run_stopped_at_its_limit_is_marked_incomplete(tmp_path: Path) -> None:
    results = {
        "a:L": {"complete": True, "cases": [_case("t::x", "PASS")]},
        "b:L": {"complete": False, "cases": [_case("t::x", "FAIL")]},
    }
    md = write_matrix(tmp_path, results)
    assert "Incomplete runs (stopped at the time limit, or did not start" in md
    assert "`-`: not run): `b:L`" in md
    assert json.loads((tmp_path / "matrix.json").read_text())["incomplete"] == ["b:L"]


def test_an_old_report_gets_case_ids(tmp_path: Path) -> None:
    old = "conformance/cases/test_exactly_once.py::test_len_matches_the_batches_handed_out[True]"
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"cases": [{"nodeid": old}]}))
    [case] = report.load_results(path)["cases"]
    assert (
        case["id"] == "test_exactly_once::test_len_matches_the_batches_handed_out[drop_last=True]"
    )


@pytest.mark.parametrize(
    ("verdict", "complete", "failed"),
    [
        ({"policy": "must", "failed": False, "reasons": []}, True, False),
        ({"policy": "must", "failed": True, "reasons": ["1 unexpected FAIL (t::x)"]}, True, True),
        (None, False, True),
    ],
)
def test_exit_status_follows_each_loaders_verdict(
    verdict: dict | None, complete: bool, failed: bool
) -> None:
    res = {"complete": complete, "cases": []} | ({"verdict": verdict} if verdict else {})
    assert bool(report.failures({"a:L": res})) is failed
    assert report.failures({"a:L": None}) == ["a:L: no complete report (see its pytest-output.txt)"]


def test_a_run_that_fails_to_start_shows_no_earlier_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale = out / report.slug("no_such_pkg_xyz:Loader")
    stale.mkdir(parents=True)
    (stale / "report.json").write_text(json.dumps({"complete": True, "cases": []}))
    args = argparse.Namespace(
        loader=["no_such_pkg_xyz:Loader"],
        out=out,
        quick=True,
        timeout=120,
        fail_on="must",
        readme=None,
        jobs=1,
    )
    assert report.run(args) == 1
    assert not (stale / "report.json").exists()
    assert "no_such_pkg_xyz" in (stale / "pytest-output.txt").read_text()


def test_a_loader_that_cannot_be_built_prints_no_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No "MUST failures 0 ... every case passed" for a loader that never started: no matrix
    printed, and the one line says why."""
    source = "class Loader:\n    def __init__(self, *a, **kw):\n        raise RuntimeError('no')\n"
    (tmp_path / "unbuildable.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    args = argparse.Namespace(
        loader=["unbuildable:Loader"],
        out=tmp_path / "out",
        quick=True,
        timeout=120,
        fail_on="must",
        readme=None,
        jobs=1,
    )
    assert report.run(args) == 1
    out, err = capsys.readouterr()
    assert "Conformance matrix" not in out
    assert "no matrix printed" in out
    assert "cannot be built: RuntimeError: no (" in err


def test_readme_totals_come_from_the_same_reports(tmp_path: Path) -> None:
    """`--readme`: the page's table between its markers is each loader's totals, with the
    version of the package it grades and the day of its run; the rest of the page is kept."""
    results = {
        "loaderspec.reference:DataLoader": {
            "started": "2026-11-26T18:40:00+00:00",
            "versions": {"loaderspec": "0.3.0", "torch": "2.13.0+cpu"},
            "cases": [_case("test_shutdown_completes::x", "PASS")],
        },
        "loaderspec.conformance.adapters.torchdata_nodes:ThreadLoader": {
            "started": "2026-11-26T19:00:00+00:00",
            "versions": {"torch": "2.13.0+cpu", "torchdata": "0.11.0"},
            "cases": [_case("test_shutdown_completes::x", "FAIL", detail="x")],
        },
    }
    table = matrix.totals_table(matrix.matrix(results), results)
    assert table.splitlines()[2:] == [
        "| `reference` (loaderspec 0.3.0) | 1 | 0 | 0 | 0 | 2026-11-26, 1 cases |",
        "| `torchdata_nodes.ThreadLoader` (torchdata 0.11.0) | 0 | 1 | 0 | 0"
        " | 2026-11-26, 1 cases |",
    ]
    page = f"intro\n{matrix.TOTALS_BEGIN}\nold\n{matrix.TOTALS_END}\nafter\n"
    assert matrix.with_totals(page, table) == (
        f"intro\n{matrix.TOTALS_BEGIN}\n{table}{matrix.TOTALS_END}\nafter\n"
    )
    with pytest.raises(ValueError, match="markers"):
        matrix.with_totals("no markers here", table)


def test_a_readme_without_markers_fails_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "README.md"
    page.write_text("no markers\n")
    args = argparse.Namespace(
        loader=["no_such_pkg_xyz:Loader"],
        out=tmp_path / "out",
        quick=True,
        timeout=120,
        fail_on="must",
        readme=page,
        jobs=1,
    )
    assert report.run(args) == 2
    assert "markers" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_default_loaders_start_with_reference_and_torch() -> None:
    loaders = report.default_loaders()
    assert loaders[:2] == ["loaderspec.reference:DataLoader", "torch.utils.data:DataLoader"]


def test_slug_is_a_safe_directory_name() -> None:
    assert report.slug("torch.utils.data:DataLoader") == "torch_utils_data_DataLoader"


def _page_width(page: Path, width: int) -> int:
    """How wide Chromium lays ``page`` out in a window ``width`` px wide (scrollWidth)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no Chromium: run `bash scripts/setup.sh` (it installs Debian's chromium)")
    probe = (
        "<script>window.onload=()=>{document.body.setAttribute('data-w',"
        "document.documentElement.scrollWidth)}</script>"
    )
    page.write_text(page.read_text() + probe)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run(
        [chromium, *flags, f"--window-size={width},800", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return int(done.stdout.split('data-w="', 1)[1].split('"', 1)[0])


def test_report_html_shows_fails_first_and_its_why_column_at_1280_px(tmp_path: Path) -> None:
    from loaderspec.conformance import ids
    from loaderspec.conformance.harness.report import write_report

    cases = [
        _case(cid, "FAIL" if i % 7 == 3 else "PASS", detail="X (MUST): " + "long why " * 40)
        for i, cid in enumerate(ids.suite())
    ]
    results = {
        "loader": "loaderspec.conformance.adapters.some_long_adapter_name:LoaderClass",
        "loader_source": "option --conformance-loader",
        "started": "2026-11-26T00:00:00+00:00",
        "versions": {"python": "3.11"},
        "cases": cases,
    }
    write_report(tmp_path, results)
    page = (tmp_path / "report.html").read_text()
    assert page.index(">FAIL<") < page.index(">PASS<")
    assert _page_width(tmp_path / "report.html", 1280) <= 1280


def test_the_html_matrix_reads_without_scrolling_sideways(tmp_path: Path) -> None:
    """Eight loaders with long names, every case: Chromium lays the page out at 1024 px and
    the page is no wider than the window."""
    from loaderspec.conformance import ids

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no Chromium: run `bash scripts/setup.sh` (it installs Debian's chromium)")
    loaders = [
        f"loaderspec.conformance.adapters.some_long_adapter_name_{i}:LoaderClass" for i in range(8)
    ]
    cases = [
        _case(cid, "FAIL", detail="X (MUST): expected " + "a very long explanation " * 20)
        for cid in ids.suite()
    ]
    write_matrix(tmp_path, {x: {"cases": cases} for x in loaders})
    page = tmp_path / "matrix.html"
    probe = (
        "<script>window.onload=()=>{document.body.setAttribute('data-w',"
        "document.documentElement.scrollWidth)}</script>"
    )
    page.write_text(page.read_text() + probe)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    done = subprocess.run(
        [chromium, *flags, f"--window-size={WIDTH},800", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    width = int(done.stdout.split('data-w="', 1)[1].split('"', 1)[0])
    assert width <= WIDTH


def test_two_loaders_of_one_adapter_module_get_two_column_titles() -> None:
    from loaderspec.conformance.harness.matrix import short_name

    names = [
        "loaderspec.conformance.adapters.torchdata_nodes:ThreadLoader",
        "loaderspec.conformance.adapters.torchdata_nodes:ProcessLoader",
        "loaderspec.conformance.adapters.grain:Loader",
        "torch.utils.data:DataLoader",
    ]
    titles = [short_name(x) for x in names]
    assert titles == [
        "torchdata_nodes.ThreadLoader",
        "torchdata_nodes.ProcessLoader",
        "grain",
        "torch",
    ]


def test_two_loaders_of_one_top_level_package_get_two_column_titles(tmp_path: Path) -> None:
    from loaderspec.conformance.harness.matrix import titles

    names = ["mypkg.fast:Loader", "mypkg.safe:Loader", "mypkg.safe:Other", "torch.utils.data:X"]
    assert titles(names) == {
        "mypkg.fast:Loader": "mypkg.fast",
        "mypkg.safe:Loader": "mypkg.safe.Loader",
        "mypkg.safe:Other": "mypkg.safe.Other",
        "torch.utils.data:X": "torch",
    }
    md = write_matrix(tmp_path, {x: {"complete": True, "cases": []} for x in names[:2]})
    assert "| case | level | `mypkg.fast` | `mypkg.safe` |" in md


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--out", "{file}"], "is a file; give a directory"),
        (["--out", "{file}/sub"], "is a file; give a directory"),
        (["--out", "/proc/loaderspec-none/out"], "cannot create that directory"),
        (["--timeout", "-5"], "must be more than 0"),
        (["--timeout", "inf"], "at most 86400"),
        (["--timeout", "1e9"], "at most 86400"),
        (["--timeout", "soon"], "is not a number of seconds"),
        (["--python", "mypkg.loader:Loader"], "is not LOADER=PYTHON"),
    ],
)
def test_bad_report_arguments_are_one_usage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    from loaderspec import cli

    file = tmp_path / "a-file"
    file.write_text("")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["report", *(a.format(file=file) for a in argv)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert says in err


def test_a_loader_of_its_own_virtualenv_runs_with_that_python(tmp_path: Path) -> None:
    """`--python LOADER=PYTHON` (scripts/matrix.sh: litdata's own virtualenv): that loader's
    suite runs with that interpreter, the others with this one."""
    from loaderspec import cli
    from loaderspec.vocabulary import LOADER_OPTION

    said = tmp_path / "said"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$0 $*" >>{said}\n')
    python.chmod(0o755)
    out = tmp_path / "out"
    argv = ["report", "--out", str(out), "--loader", "a.b:C", "--python", f"a.b:C={python}"]
    assert cli.main([*argv, "--fail-on", "never"]) == 1  # no report: the fake wrote none
    [line] = said.read_text().splitlines()
    assert line.startswith(
        f"{python} -m pytest --pyargs loaderspec.conformance {LOADER_OPTION}=a.b:C"
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import loaderspec
    from loaderspec import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"loaderspec {loaderspec.__version__}"


def test_the_matrix_notes_show_no_install_folders() -> None:
    """A traceback's file names lose the folders a run was installed in (a developer's scratch
    path would otherwise reach the published matrix page); a leaked file's path stays."""
    from loaderspec.conformance.harness.matrix import matrix

    detail = (
        'X (MUST): expected y; actual File "/tmp/fresh/.venv/lib/python3.11/site-packages/torch/'
        'a.py", line 1; File "/home/me/loaderspec/conformance/adapters/_front.py"; fds: 28 -> '
        "/tmp/tmpgh0n5wlu"
    )
    m = matrix({"a:L": {"complete": True, "cases": [_case("t::x", "FAIL", detail=detail)]}})
    [note] = m["notes"]
    assert 'File "torch/a.py"' in note["cause"]
    assert 'File "conformance/adapters/_front.py"' in note["cause"]
    assert "/tmp/fresh" not in note["cause"]
    assert "/home/me" not in note["cause"]


def test_full_runs_the_named_loaders_whole_and_the_others_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/main.sh's selection: the reference and torch in full, the peers' quick cases."""
    from loaderspec import cli
    from loaderspec import report as report_cmd

    ran: dict[str, bool] = {}

    def run_one(loader: str, out: Path, quick: bool, *rest: object) -> None:
        ran[loader] = quick

    monkeypatch.setattr(report_cmd, "run_one", run_one)
    argv = ["report", "--out", str(tmp_path), "--fail-on", "never", "--quick"]
    cli.main([*argv, "--loader", "peer.mod:L", "--full", "ref.mod:L"])
    assert ran == {"peer.mod:L": True, "ref.mod:L": False}
    assert cli.main(["report", "--out", str(tmp_path), "--full", "ref.mod:L"]) == 2
