"""Graded outcomes: PASS, FAIL, NON-STRICT, SKIP, and the wall-clock bounds behind them.

A MUST property violated is a FAIL (the case fails). A SHOULD property violated while the case's
MUST properties hold is NON-STRICT: the case passes, and its `Grade` records which property was
weakened and by how much. Wall-clock bounds (architecture.md, "Levels and grading"): 0.5 s is
the SHOULD bound (`PromptFaultHandling`); past 15 s (3 x torch's 5 s status-check interval) the
event counts as a hang of the case's MUST property.

A `Grade` made for a pytest case (`Grade()`, the `grade` fixture) fails the case at the first
MUST violation; one made with `collect=True` records every violation instead, for graders that
are not a pytest case (`loaderspec.scenarios`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from loaderspec.faultinject.driver import MUST_BOUND_S

from loaderspec.vocabulary import Level, PropertyName, property_named

__all__ = [
    "FAIL",
    "MUST_BOUND_S",
    "NON_STRICT",
    "OUTCOMES",
    "PASS",
    "PROMPT",
    "SHOULD_BOUND_S",
    "SKIP",
    "Figure",
    "Grade",
    "Violation",
    "fail",
    "spec_property",
]

PASS, FAIL, NON_STRICT, SKIP = "PASS", "FAIL", "NON-STRICT", "SKIP"
OUTCOMES = (PASS, FAIL, NON_STRICT, SKIP)

SHOULD_BOUND_S = 0.5
PROMPT = PropertyName.PROMPT_FAULT_HANDLING


def spec_name(prop: PropertyName) -> str:
    """``prop``'s spec name, what a report shows. Cases name properties by ``PropertyName``
    member, so a misspelt one fails at import; a spec name given as a string is looked up too.

    Raises:
        ValueError: a string that names no property.
    """
    return PropertyName(prop).value


def spec_property(*props: PropertyName) -> pytest.MarkDecorator:
    """The ``spec_property`` marker of a case that checks ``props`` (their spec names: what the
    plugin, the catalog and the report read)."""
    return pytest.mark.spec_property(*(spec_name(p) for p in props))


def violation(prop: PropertyName, expected: str, actual: str) -> str:
    """How a violated property reads: `Property (LEVEL): expected ...; actual ...`."""
    name = spec_name(prop)
    return f"{name} ({property_named(name).level.value}): expected {expected}; actual {actual}"


class Violation(pytest.fail.Exception):  # type: ignore[name-defined]  # pytest.fail.Exception is set at run time: mypy sees no class
    """A failed case's exception, naming the property whose check failed: the plugin counts the
    case under it (a case's markers say what it may check, not what broke)."""

    __module__ = "builtins"  # pytest shows it as "Violation: ...", as it shows "Failed: ..."

    def __init__(self, prop: str, message: str) -> None:
        super().__init__(message, pytrace=False)
        self.property = prop


def must(prop: PropertyName) -> str:
    """``prop``, a MUST property of the vocabulary: only a MUST's violation is a FAIL.

    Raises:
        ValueError: ``prop`` is a SHOULD (a deviation grades NON-STRICT: ``Grade.non_strict``),
            or no property of the vocabulary.
    """
    name = spec_name(prop)
    if property_named(name).level is not Level.MUST:
        raise ValueError(f"{name} is a SHOULD property: a deviation is NON-STRICT, not a FAIL")
    return name


def fail(prop: PropertyName, expected: str, actual: str) -> None:
    """Fail the running case: MUST property `prop` is violated.

    Raises:
        Violation: always, naming ``prop``.
        ValueError: ``prop`` is not a MUST property (``must``).
    """
    raise Violation(must(prop), violation(prop, expected, actual))


@dataclass
class Figure:
    name: str
    value: float
    unit: str


@dataclass
class Grade:
    """Per-case record of figures and SHOULD-level deviations (the `grade` fixture)."""

    collect: bool = False  # record MUST violations in `violations` instead of failing the case
    figures: list[Figure] = field(default_factory=list)
    non_strict_notes: list[str] = field(default_factory=list)
    non_strict_properties: list[str] = field(default_factory=list)  # each once, in order
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Say why the case passed as it did (a property that holds trivially for this design),
        shown as a PASS's detail in the report."""
        self.notes.append(text)

    def figure(self, name: str, value: float, unit: str = "s") -> None:
        """Record a measured figure (shown in the report)."""
        self.figures.append(Figure(name, round(float(value), 3), unit))

    def non_strict(self, prop: PropertyName, figure: float | None = None, detail: str = "") -> None:
        """Record that SHOULD property `prop` was not met (the case grades NON-STRICT).

        Raises:
            ValueError: `prop` is a MUST property (that is a FAIL: call `fail`).
        """
        name = spec_name(prop)
        if property_named(name).level is not Level.SHOULD:
            raise ValueError(f"{name} is a MUST property: a violation is a FAIL, not NON-STRICT")
        if figure is not None:
            self.figure(name, figure)
        if name not in self.non_strict_properties:
            self.non_strict_properties.append(name)
        self.non_strict_notes.append(f"{name}: {detail}" if detail else name)

    def should(self, what: str, detail: str) -> None:
        """Record that a SHOULD the spec gives no property (`what`, a drop-in's claim such as its
        order for a seeded generator) was not met: the case grades NON-STRICT, never FAIL."""
        self.non_strict_notes.append(f"{what} (SHOULD; no spec property): {detail}")

    def fail(self, prop: PropertyName, expected: str, actual: str) -> None:
        """MUST property `prop` is violated: fail the case (or, collecting, record it)."""
        must(prop)
        if not self.collect:
            fail(prop, expected, actual)
        self.violations.append(violation(prop, expected, actual))

    def bounded(self, must_prop: PropertyName, name: str, seconds: float | None, what: str) -> None:
        """Grade a latency: <= 0.5 s PASS, <= 15 s NON-STRICT (PromptFaultHandling), else FAIL
        of `must_prop` (`seconds` None: it never happened within the bound)."""
        if seconds is None or seconds > MUST_BOUND_S:
            bound = f"within {MUST_BOUND_S:g} s"
            self.fail(must_prop, f"{what} {bound}", f"not {bound}")
            return
        self.figure(name, seconds)
        if seconds > SHOULD_BOUND_S:
            self.non_strict(
                PROMPT, None, f"{what} took {seconds:.2f} s (SHOULD: within {SHOULD_BOUND_S:g} s)"
            )

    def as_dict(self) -> dict[str, Any]:
        return {
            "figures": [f.__dict__ for f in self.figures],
            "non_strict": list(self.non_strict_notes),
            "notes": list(self.notes),
        }
