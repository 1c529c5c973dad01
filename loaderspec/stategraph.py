"""The spec's state graph, as TLC dumps it (``-dump dot,actionlabels``), and paths through it.

Owns: running TLC once on a small model to get every reachable state and every labelled step,
reading the ``.dot`` file back (states as variable -> value dicts, steps labelled with the spec
action's name), and choosing paths: the shortest path that takes a given action, and seeded
random walks. Must not know what the variables mean (``loaderspec.scenarios`` does).

TLC labels a step with the action's name only, not its parameters; whoever needs the
parameters reads them off the two states (the step's diff).
"""

from __future__ import annotations

import random
import re
import tempfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderspec import tlc
from loaderspec.tlavalues import parse

_NODE_RE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(,style = filled)?\];?$')
_EDGE_RE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="(\w+)"')
_VAR_LINE_RE = re.compile(r"^(?:/\\ )?([A-Za-z_]\w*) = (.*)$", re.S)


@dataclass(frozen=True)
class Edge:
    """One labelled step of the graph: an edge of TLC's state graph, ``source`` -> ``target``."""

    action: str
    source: str  # state id
    target: str


@dataclass
class Graph:
    """Reachable states and labelled steps of one model. States are kept as TLC's labels and
    parsed on demand (``state(id)``): a path needs a few of the thousands a model has."""

    labels: dict[str, str] = field(default_factory=dict)
    initial: list[str] = field(default_factory=list)
    steps: dict[str, list[Edge]] = field(default_factory=dict)  # by source state

    def state(self, state_id: str) -> dict[str, Any]:
        """The variables of one state, parsed."""
        return _state_vars(self.labels[state_id])

    @property
    def actions(self) -> set[str]:
        return {s.action for out in self.steps.values() for s in out}

    def edges(self) -> int:
        return sum(len(out) for out in self.steps.values())


def _unescape(label: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], label)


def _state_vars(label: str) -> dict[str, Any]:
    """``/\\ x = 1`` conjuncts of a node label, each value parsed."""
    values: dict[str, Any] = {}
    for chunk in re.split(r"\n(?=/\\ )", _unescape(label)):
        match = _VAR_LINE_RE.match(chunk.strip())
        if match:
            values[match.group(1)] = parse(match.group(2))
    return values


def parse_dot(text: str) -> Graph:
    """A graph from TLC's ``-dump dot,actionlabels`` output."""
    graph = Graph()
    for line in text.splitlines():
        line = line.strip()
        if match := _EDGE_RE.match(line):
            step = Edge(match.group(3), match.group(1), match.group(2))
            graph.steps.setdefault(step.source, []).append(step)
        elif match := _NODE_RE.match(line):
            graph.labels[match.group(1)] = match.group(2)
            if match.group(3):
                graph.initial.append(match.group(1))
    return graph


def dump_graph(spec: Path, constants: Mapping[str, str], *, timeout_s: float = 120.0) -> Graph:
    """Run TLC on ``spec`` (its ``Init``/``Next``) with ``constants`` and read the state graph.

    Raises:
        RuntimeError: TLC did not finish (the message carries its output's tail).
    """
    with tempfile.TemporaryDirectory(prefix="loaderspec-graph-") as tmp:
        work = Path(tmp)
        for module in spec.parent.glob("*.tla"):
            (work / module.name).write_text(module.read_text())
        cfg = work / f"MCGraph{spec.stem}.cfg"
        lines = ["CONSTANTS", *(f"  {k} = {v}" for k, v in constants.items())]
        cfg.write_text("\n".join([*lines, "INIT Init", "NEXT Next"]) + "\n")
        dot = work / "graph"
        result = tlc.run_tlc(
            work / spec.name,
            cfg,
            workdir=work,
            extra_args=("-deadlock", "-dump", "dot,actionlabels", str(dot)),
            timeout_s=timeout_s,
            jvm_args=tlc.FAST_START,  # a few thousand states: start-up dominates
        )
        dot_file = work / "graph.dot"
        if not result.ok or not dot_file.is_file():
            tail = "\n".join(result.output.splitlines()[-15:])
            raise RuntimeError(f"TLC could not dump the state graph ({result.violated}):\n{tail}")
        return parse_dot(dot_file.read_text())


def shortest_path_taking(graph: Graph, action: str) -> list[Edge] | None:
    """The fewest steps from an initial state ending with a step of ``action`` (BFS)."""
    parent: dict[str, Edge | None] = dict.fromkeys(graph.initial)
    queue = deque(graph.initial)
    while queue:
        state = queue.popleft()
        for step in graph.steps.get(state, []):
            if step.action == action:
                return [*_path_to(parent, state), step]
            if step.target not in parent:
                parent[step.target] = step
                queue.append(step.target)
    return None


def _path_to(parent: Mapping[str, Edge | None], state: str) -> list[Edge]:
    path: list[Edge] = []
    step = parent[state]
    while step is not None:
        path.append(step)
        step = parent[step.source]
    return path[::-1]


def random_walk(graph: Graph, rng: random.Random, max_steps: int = 200) -> list[Edge]:
    """A seeded random behaviour from an initial state until no step is left (or max_steps)."""
    state = rng.choice(graph.initial)
    path: list[Edge] = []
    for _ in range(max_steps):
        out = graph.steps.get(state)
        if not out:
            break
        step = rng.choice(out)
        path.append(step)
        state = step.target
    return path
