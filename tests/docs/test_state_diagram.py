"""The core's state diagram is drawn from its transition tables: a changed table is a changed
diagram, and a table of another shape or none at all is reported."""

from __future__ import annotations

import enum
import types

import pytest
from loaderspec.reference import transitions

from loaderspec.docsite import statediagram
from loaderspec.vocabulary import Action


def _edges(dot: str) -> set[str]:
    return {line.strip() for line in dot.splitlines() if "->" in line}


def test_every_transition_of_the_core_is_an_edge():
    (table,) = [t for t in statediagram.core_tables() if t.name == "PHASE_TRANSITIONS"]
    dot = statediagram.to_dot(table)
    for state, row in transitions.PHASE_TRANSITIONS.items():
        for action, target in row.items():
            edge = [e for e in _edges(dot) if e.startswith(f'"{state.name}" -> "{target.name}"')]
            assert len(edge) == 1
            assert f"{action.value}\\l" in edge[0]


def test_changing_a_core_table_changes_the_diagram(monkeypatch):
    before = [statediagram.render_svg(statediagram.to_dot(t)) for t in statediagram.core_tables()]
    changed = {phase: dict(row) for phase, row in transitions.PHASE_TRANSITIONS.items()}
    changed[transitions.Phase.FAILED] = {Action.MAIN_RESUME_ITERATION: transitions.Phase.RESUMING}
    monkeypatch.setattr(transitions, "PHASE_TRANSITIONS", changed)
    after = [statediagram.render_svg(statediagram.to_dot(t)) for t in statediagram.core_tables()]
    assert after != before
    assert "FAILED&#45;&gt;RESUMING" in after[0]  # the new edge, as Graphviz titles it
    assert "FAILED&#45;&gt;RESUMING" not in before[0]


def test_a_new_table_in_the_core_is_drawn_without_touching_the_generator(monkeypatch):
    shutdown = {
        ("open", "MainSetPinDone"): "pin_stopping",
        ("pin_stopping", "MainJoinPinThread"): "closed",
    }
    monkeypatch.setattr(transitions, "SHUTDOWN_TRANSITIONS", shutdown, raising=False)
    tables = {t.name: t for t in statediagram.core_tables()}
    assert set(tables) == {"PHASE_TRANSITIONS", "SHUTDOWN_TRANSITIONS"}
    dot = statediagram.to_dot(tables["SHUTDOWN_TRANSITIONS"])
    assert '"open" -> "pin_stopping" [label="MainSetPinDone\\l"];' in dot
    assert '"closed" [label="closed", peripheries=2];' in dot  # no way out


def test_a_core_without_tables_is_an_error_naming_the_fix():
    class State(enum.Enum):
        A = 1

    module = types.ModuleType("fake_core")
    module.TRANSITIONS_LIST = [State.A]
    with pytest.raises(LookupError, match=r"point loaderspec\.docsite\.statediagram\.core_tables"):
        statediagram.core_tables(module)
