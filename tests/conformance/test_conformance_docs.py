"""The suite's shape: one file per spec property, every case documented, the docs' case table
current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from loaderspec.conformance import catalog

from loaderspec.vocabulary import ALL_PROPERTIES

ROOT = Path(__file__).resolve().parents[2]
# A spec-only property (Property.spec_only says why) has no case file yet: TLC checks it.
GRADED = [p.name for p in ALL_PROPERTIES if not p.spec_only]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@pytest.mark.parametrize("prop", GRADED)
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


@pytest.mark.parametrize("prop", GRADED)
def test_every_property_is_checked_by_two_scenarios(prop: str) -> None:
    """A small change of scenario must not let a violation through: two cases at least check
    each property (each is shown failing on a broken loader: test_conformance_broken.py)."""
    checking = [name for _, name, props, _, _ in catalog.cases() if prop in props]
    assert len(checking) >= 2, f"{prop} is checked only by {checking}"


# How a check grades a property, by the method it calls: a FAIL only for a MUST, NON-STRICT only
# for a SHOULD (conformance.harness.grading refuses the other way round at run time too).
_GRADED_AS = {"fail": "MUST", "bounded": "MUST", "non_strict": "SHOULD"}


def _graded(path: Path) -> list[tuple[str, str, str, set[str] | None]]:
    """(function, method, property, the function's spec_property markers or None) for each
    grading call of ``path`` whose property is a literal, a ``PropertyName`` member or a
    module-level constant bound to one."""
    import ast

    from loaderspec.vocabulary import PropertyName

    def literal(arg: ast.expr) -> str | None:  # "ExactlyOnce" or PropertyName.EXACTLY_ONCE
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Attribute) and getattr(arg.value, "id", "") == "PropertyName":
            return PropertyName[arg.attr].value
        return None

    tree = ast.parse(path.read_text())
    consts = {
        t.id: name
        for node in tree.body
        if isinstance(node, ast.Assign) and (name := literal(node.value)) is not None
        for t in node.targets
        if isinstance(t, ast.Name)
    }

    def value(arg: ast.expr) -> str | None:
        if (name := literal(arg)) is not None:
            return name
        return consts.get(arg.id) if isinstance(arg, ast.Name) else None

    out = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        markers = None
        for dec in fn.decorator_list:
            name = (
                getattr(dec.func, "attr", getattr(dec.func, "id", ""))
                if isinstance(dec, ast.Call)
                else ""
            )
            if isinstance(dec, ast.Call) and name == "spec_property":
                markers = {v for a in dec.args if (v := value(a)) is not None}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            method = getattr(call.func, "attr", getattr(call.func, "id", ""))
            if method in _GRADED_AS and call.args and (prop := value(call.args[0])):
                out.append((fn.name, method, prop, markers))
    return out


def test_every_graded_property_has_the_spec_level_and_is_the_cases() -> None:
    """One level per behaviour: a case FAILs only a MUST and grades NON-STRICT only a SHOULD of
    the spec, and grades directly only the properties its markers name (a batch after a timeout
    is the SHOULD FailStopAfterFatalError's, not NoDeliveryAfterShutdown's MUST)."""
    from loaderspec.vocabulary import property_named

    files = sorted((ROOT / "conformance" / "cases").glob("test_*.py"))
    files += sorted((ROOT / "conformance" / "harness").glob("*.py"))
    seen = 0
    for path in files:
        for fn, method, prop, markers in _graded(path):
            seen += 1
            level = property_named(prop).level.name
            assert level == _GRADED_AS[method], f"{path.name}::{fn}: {method}({prop}) of a {level}"
            if markers is not None:
                assert prop in markers, f"{path.name}::{fn} grades {prop}, not among {markers}"
    assert seen > 100, seen  # the walk found the suite's grading calls


def test_a_misspelt_property_fails_where_it_is_named() -> None:
    """Cases name properties by `PropertyName` member: a typo is an AttributeError at import, a
    string that names no property a ValueError; the marker holds the spec name a report shows."""
    from loaderspec.conformance.harness import Grade, spec_property

    from loaderspec.vocabulary import PropertyName

    with pytest.raises(AttributeError):
        PropertyName.EXACLTY_ONCE  # noqa: B018  # the typo is the point
    with pytest.raises(ValueError, match="ExaclyOnce"):
        spec_property("ExaclyOnce")
    with pytest.raises(ValueError, match="ExaclyOnce"):
        Grade().fail("ExaclyOnce", "x", "y")
    marker = spec_property(PropertyName.EXACTLY_ONCE, PropertyName.PROMPT_FAULT_HANDLING)
    assert marker.mark.args == ("ExactlyOnce", "PromptFaultHandling")
    assert all(type(a) is str for a in marker.mark.args)
