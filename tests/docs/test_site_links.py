"""Links from the pages into the checkout: lines and symbols resolve to a source page's line,
and anything else is reported with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from loaderspec.docsite import links, sources

CORE = '''"""A module."""

LIMIT = 3


class Core:
    @property
    def phase(self):
        return 1

    def step(self):
        return 2
'''
SPEC = """---- MODULE M ----
\\* a comment
Step(w) ==
    /\\ x' = x + 1

    /\\ y' = y
Next == Step(0)
====
"""


@pytest.fixture
def state(tmp_path: Path) -> links.LinkState:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "core.py").write_text(CORE)
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "M.tla").write_text(SPEC)
    (tmp_path / "notes.txt").write_text("not published\n")
    return links.LinkState(tmp_path / "docs", tmp_path, page="sub/page.md")


def test_symbols_and_lines():
    assert sources.python_symbols(CORE)["Core.phase"] == sources.Span(7, 9)
    assert sources.python_symbols(CORE)["LIMIT"] == sources.Span(3, 3)
    assert sources.tla_definitions(SPEC) == {
        "Step": sources.Span(3, 6),
        "Next": sources.Span(7, 7),
    }


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("../../reference/core.py#Core.step", "../source/reference/core.py.md#__codelineno-0-11"),
        ("../../reference/core.py#L3", "../source/reference/core.py.md#__codelineno-0-3"),
        ("../../spec/M.tla#L3-L6", "../source/spec/M.tla.md#__codelineno-0-3"),
        ("../../spec/M.tla#Step", "../source/spec/M.tla.md#__codelineno-0-3"),
        ("../../spec/M.tla", "../source/spec/M.tla.md"),
        ("../other.md#a", None),  # a page of the site: MkDocs checks it
        ("https://example.org/x.py", None),
    ],
)
def test_links_that_resolve(state, href, expected):
    assert state.rewrite(href) == expected
    assert state.broken == []


@pytest.mark.parametrize(
    ("href", "why"),
    [
        (
            "../../reference/core.py#Core.stpe",
            "no such definition in the file (did you mean Core.step",
        ),
        ("../../reference/core.py#L13", "the file has lines 1-12"),
        ("../../spec/M.tla#Init", "no such definition"),
        ("../../notes.txt", "not a published source file"),
        ("../../../elsewhere.py", "points outside the checkout"),
    ],
)
def test_links_that_do_not_resolve_are_reported(state, href, why):
    assert state.rewrite(href) is None
    (problem,) = state.broken
    assert problem.startswith(f"sub/page.md: {href}: ")
    assert why in problem


def test_the_scan_finds_inline_and_reference_links(state):
    text = (
        "[a](../../spec/M.tla#Step) and ![b](<../../reference/core.py>)\n\n[c]: ../../notes.txt\n"
    )
    assert state.linked(text, "sub/page.md") == {"spec/M.tla", "reference/core.py", "notes.txt"}
