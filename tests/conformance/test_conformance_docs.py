"""The suite's shape: one file per spec property, every case documented, the docs' case table
current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from loaderspec.conformance import catalog

from loaderspec.vocabulary import ALL_PROPERTIES

ROOT = Path(__file__).resolve().parents[2]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@pytest.mark.parametrize("prop", [p.name for p in ALL_PROPERTIES])
def test_every_property_has_its_file_of_cases(prop: str) -> None:
    path = ROOT / "conformance" / "cases" / f"test_{_snake(prop)}.py"
    assert path.exists(), f"no case file for {prop}: expected {path.name}"
    mine = [c for c in catalog.cases() if c[0] == path.name]
    assert mine, f"{path.name} has no cases"
    for _, name, props, _, _ in mine:
        assert props, f"{name}: no spec_property marker"
        assert props[0] == prop, f"{name}: first spec_property should be {prop}"


def test_every_case_documents_property_seed_and_issue() -> None:
    import importlib
    import inspect

    for file, name, _, desc, guards in catalog.cases():
        module = importlib.import_module(f"loaderspec.conformance.cases.{file[:-3]}")
        doc = inspect.getdoc(getattr(module, name)) or ""
        assert desc, f"{name}: no one-line description"
        assert "Property:" in doc, f"{name}: docstring lacks Property:"
        assert "Seed" in doc, f"{name}: docstring lacks the seed sentence"
        assert re.search(r"[A-K]\d", guards), f"{name}: no FAILURE-MODES entry in Guards"


def test_docs_case_table_is_current() -> None:
    page = (ROOT / "docs" / "conformance.md").read_text()
    assert catalog.render(page) == page, (
        "run: python -m loaderspec.conformance.catalog --write docs/conformance.md"
    )


@pytest.mark.parametrize("prop", [p.name for p in ALL_PROPERTIES])
def test_every_property_is_checked_by_two_scenarios(prop: str) -> None:
    """A small change of scenario must not let a violation through: two cases at least check
    each property (each is shown failing on a broken loader: test_conformance_broken.py)."""
    checking = [name for _, name, props, _, _ in catalog.cases() if prop in props]
    assert len(checking) >= 2, f"{prop} is checked only by {checking}"
