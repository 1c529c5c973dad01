"""Case ids: named from the case file's module, the function and its parameters by name; the
same whatever the directory pytest ran from; the enumeration the expectation files are checked
against equals what pytest collects; loaderspec 0.1's node ids are aliases."""

from __future__ import annotations

import concurrent.futures
import re
from pathlib import Path

import pytest
from conformance_runner import ROOT, run_suite
from loaderspec.conformance import ids

pytest_plugins = ["pytester"]

LEN_FILE = "conformance/cases/test_exactly_once.py"
LEN = "test_exactly_once::test_len_matches_the_batches_handed_out"


def test_ids_name_parameters_sorted_and_leave_the_folder_out() -> None:
    assert ids.case_id(
        "loaderspec.conformance.cases.test_x", "test_y", {"workers": 3, "prefetch": 2}
    ) == ("test_x::test_y[prefetch=2,workers=3]")
    assert ids.case_id("test_x", "test_y") == "test_x::test_y"


def test_every_id_is_unique_and_readable() -> None:
    cases = ids.suite()
    assert len(cases) > 40
    for cid in cases:
        assert re.fullmatch(r"test_\w+::test_\w+(\[(\w+=[\w.-]+)(,\w+=[\w.-]+)*\])?", cid), cid


def test_the_enumeration_equals_what_pytest_collects(pytester: pytest.Pytester) -> None:
    """The ids expectation files are checked against (enumerated from the parametrize marks)
    are the ids the plugin gives the collected cases."""
    reprec = pytester.inline_run(
        "--co", str(ROOT / "conformance"), "-p", "no:cacheprovider", "--loader=reference:DataLoader"
    )
    [call] = reprec.getcalls("pytest_collection_finish")
    collected = {ids.of_item(item) for item in call.session.items}
    assert collected == set(ids.suite())


def test_old_node_ids_are_aliases_of_the_new_ids() -> None:
    new = f"{LEN}[drop_last=False]"
    assert ids.canonical(f"{LEN_FILE}::test_len_matches_the_batches_handed_out[False]") == new
    assert ids.canonical("conformance/test_exactly_once.py::" + new.split("::")[1]) is None
    assert (
        ids.canonical(
            "conformance/test_exactly_once.py::test_len_matches_the_batches_handed_out[False]"
        )
        == new
    )
    assert ids.canonical(LEN) == LEN  # a function: all its cases
    assert ids.canonical("test_exactly_once::test_no_such_case") is None


def test_a_renamed_case_file_keeps_its_old_ids_as_aliases() -> None:
    new = "test_fail_stop_after_fatal_error::test_next_after_worker_death_raises_promptly"
    assert new in ids.suite()
    for old in (
        "test_fail_stop_after_worker_death::test_next_after_worker_death_raises_promptly",
        "conformance/test_fail_stop_after_worker_death.py::"
        "test_next_after_worker_death_raises_promptly",
        "conformance/cases/test_fail_stop_after_worker_death.py::"
        "test_next_after_worker_death_raises_promptly",
    ):
        assert ids.canonical(old) == new
    assert all(target in ids.suite() for target in ids.RENAMED.values())


@pytest.mark.slow
def test_report_ids_are_the_same_from_a_checkout_pyargs_and_any_directory(
    tmp_path: Path,
) -> None:
    """The same two cases run three ways, side by side: from the checkout by path, by --pyargs
    from another directory, and by absolute path from another directory."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs = {
        "checkout": ([LEN_FILE], ROOT),
        "pyargs": (["--pyargs", "loaderspec.conformance.cases.test_exactly_once"], elsewhere),
        "absolute": ([str(ROOT / LEN_FILE)], elsewhere),
    }
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        futures = {
            name: pool.submit(
                run_suite, [*selectors, "-k", "len_matches"], None, tmp_path / name, 300, cwd=cwd
            )
            for name, (selectors, cwd) in runs.items()
        }
    got = {}
    for name, future in futures.items():
        code, out, results = future.result()
        assert code == 0, out[-3000:]
        assert results is not None
        got[name] = sorted(c["id"] for c in results["cases"])
    expected = [f"{LEN}[drop_last=False]", f"{LEN}[drop_last=True]"]
    assert got == {name: expected for name in runs}
