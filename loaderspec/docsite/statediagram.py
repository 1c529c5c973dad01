"""The core's state diagrams, drawn from its transition tables (as h11 draws its own).

``core_tables`` is the one place that knows where the tables are: every module-level
``*TRANSITIONS`` mapping of ``reference.transitions``, either nested
(``{state: {action: state}}``, like ``PHASE_TRANSITIONS``) or flat
(``{(state, action): state}``). A table added there is drawn without touching this module; a
table of another shape needs only ``core_tables`` changed.
Graphviz's ``dot`` (Debian's ``graphviz``, installed by ``scripts/setup.sh``) lays it out as SVG.
"""

from __future__ import annotations

import enum
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

TABLES_MODULE = "loaderspec.reference.transitions"
TABLES_SOURCE = "reference/transitions.py"
DOT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Table:
    """One transition table: its name in the core, and ``{state: {action: next state}}``."""

    name: str
    transitions: Mapping[Any, Mapping[Any, Any]]


def _nested(table: Mapping[Any, Any]) -> dict[Any, dict[Any, Any]] | None:
    """The table as ``{state: {action: state}}``, or None if it is of neither known shape."""
    if all(isinstance(v, Mapping) for v in table.values()):
        return {state: dict(row) for state, row in table.items()}
    if all(isinstance(k, tuple) and len(k) == 2 for k in table):
        out: dict[Any, dict[Any, Any]] = {}
        for (state, action), target in table.items():
            out.setdefault(state, {})[action] = target
            out.setdefault(target, {})
        return out
    return None


def core_tables(module: ModuleType | None = None) -> list[Table]:
    """The transition tables of the core (``reference.transitions`` unless another module is given).

    Raises:
        LookupError: the module defines no ``*TRANSITIONS`` table of a known shape.
    """
    if module is None:
        import importlib

        module = importlib.import_module(TABLES_MODULE)
    tables = []
    for name, value in vars(module).items():
        if name.endswith("TRANSITIONS") and isinstance(value, Mapping):
            nested = _nested(value)
            if nested is not None:
                tables.append(Table(name, nested))
    if not tables:
        raise LookupError(
            f"{module.__name__} defines no *TRANSITIONS table of shape {{state: {{action: state}}}}"
            " or {(state, action): state}; point loaderspec.docsite.statediagram.core_tables at"
            " the core's tables"
        )
    return tables


def state_label(state: Any) -> str:
    """A state as drawn: an enum member's name (``RUNNING``), anything else as text."""
    return state.name if isinstance(state, enum.Enum) else str(state)


def action_label(action: Any) -> str:
    """An action as drawn: an enum member's value (the spec's name), anything else as text."""
    return str(action.value) if isinstance(action, enum.Enum) else str(action)


def to_dot(table: Table) -> str:
    """Graphviz source: one node per state (the first is where the machine starts; a state with
    no way out is drawn double), one edge per (state, next state) labelled with its actions."""
    states = list(table.transitions)
    for row in table.transitions.values():
        states += [t for t in row.values() if t not in states]
    edges: dict[tuple[str, str], list[str]] = {}
    for state, row in table.transitions.items():
        for action, target in row.items():
            edges.setdefault((state_label(state), state_label(target)), []).append(
                action_label(action)
            )
    lines = [
        f'digraph "{table.name}" {{',
        '  graph [rankdir=TB, fontname="DejaVu Sans", fontsize=11, nodesep=0.5, ranksep=0.9];',
        '  node [shape=box, style="rounded,filled", fillcolor="#e8eaf6", color="#3f51b5",'
        ' fontname="DejaVu Sans", fontsize=12];',
        '  edge [fontname="DejaVu Sans Mono", fontsize=11, color="#555555"];',
        '  start [shape=point, width=0.12, label=""];',
        f'  start -> "{state_label(states[0])}";',
    ]
    for state in states:
        final = not table.transitions.get(state)
        extra = ", peripheries=2" if final else ""
        lines.append(f'  "{state_label(state)}" [label="{state_label(state)}"{extra}];')
    for (source, target), actions in edges.items():
        text = "\\l".join(actions) + "\\l"  # left-justified, one action a line
        lines.append(f'  "{source}" -> "{target}" [label="{text}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(dot_source: str) -> str:
    """Lay out ``dot_source`` with Graphviz.

    Raises:
        RuntimeError: ``dot`` is not installed (the message says how to get it) or failed.
    """
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(
            "Graphviz's `dot` is not installed: run `bash scripts/test.sh` or"
            " `LOADERSPEC_EXTRAS=docs bash scripts/setup.sh` (they install Debian's graphviz),"
            " or `apt-get install graphviz`"
        )
    done = subprocess.run(
        [dot, "-Tsvg"],
        input=dot_source,
        capture_output=True,
        text=True,
        timeout=DOT_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dot failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout
