"""The generated Markdown: drift between the vocabulary and the code is an error, the matrix
shows every loader's grades and details, and the API pages list public modules only."""

from __future__ import annotations

import json

import pytest

from loaderspec.docsite import pages
from loaderspec.vocabulary import CORE_METHOD, Action, Actor


def test_an_action_whose_core_method_is_gone_fails_the_page(monkeypatch):
    monkeypatch.setitem(CORE_METHOD, Action.MAIN_GET_DATA, "get_data_renamed")
    with pytest.raises(LookupError, match=r"no method 'get_data_renamed'.*MAIN_GET_DATA"):
        pages.actions(Actor.MAIN, "../")


def test_each_action_of_an_actor_has_its_section():
    text = pages.actions(Actor.PIN, "../")
    assert text.count("\n### ") + text.startswith("### ") == 3
    for action in ("PinGetResult", "PinPutData", "PinExit"):
        assert f"### {action} {{ #{action} }}" in text
        assert f"(../spec/DataLoader.tla#{action})" in text


def test_the_matrix_has_totals_grades_and_details(tmp_path):
    def case(name, outcome, detail=""):
        return {
            "nodeid": f"conformance/test_x.py::{name}[1]",
            "case": f"{name}[1]",
            "properties": ["ExactlyOnce"],
            "level": "MUST",
            "outcome": outcome,
            "detail": detail,
            "figures": [],
        }

    for slug, loader, outcome in (
        ("a", "loaderspec.reference:DataLoader", "PASS"),
        ("b", "pkg:L", "FAIL"),
    ):
        (tmp_path / slug).mkdir()
        report = {
            "loader": loader,
            "started": "2026-11-23T00:00",
            "cases": [case("test_y", outcome, "got <x> *2*")],
        }
        (tmp_path / slug / "report.json").write_text(json.dumps(report))
    text = pages.matrix(tmp_path, "../", "reports/")
    assert (
        "| **reference**: `loaderspec.reference:DataLoader` | 1 | 0 | 0 | 0 |"
        " [report.html](reports/a/report.html)" in text
    )
    assert "| **pkg**: `pkg:L` | 0 | 1 | 0 | 0 |" in text
    assert "(../conformance/test_x.py#test_y)" in text
    assert "`test_y[1]`: got &lt;x&gt; \\*2\\*" in text  # the detail, shown as it is


def test_api_pages_list_public_modules_only():
    names = pages.public_modules("conformance")
    assert names[0] == "conformance"
    assert f"{names[0]}.plugin" in names  # the docs site reads the checkout's folders
    assert not [n for n in names if n.split(".")[-1].startswith(("_", "test_"))]


def test_every_action_links_to_where_it_is_logged():
    """Each action's section says where the reference or faultinject logs it, including the
    per-batch path's aliases (``_GET = Action.MAIN_GET_DATA``): never "nowhere yet"."""
    logged = pages.logged_at()
    assert [a.value for a in Action if a.value not in logged] == []
    assert {path for path, _ in logged["MainCallNext"]} == {"reference/loop.py"}
