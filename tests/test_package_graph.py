"""docs/architecture.md's package graph is the graph of the real imports, and it has no cycle.

Nodes are the top-level packages, with two leaves of ``loaderspec`` drawn on their own because
everything else imports them: ``vocabulary`` (``loaderspec.vocabulary``, the names),
``graded`` (``loaderspec.graded``, the one list of graded loaders),
``tracewriter`` (``loaderspec.tracewriter``, the one trace writer) and ``fakeaccel``
(``loaderspec.fakeaccel``, the pinning backend). ``loaderspec`` is the rest: the
tools (CLI, TLC runner, trace checker, spec scenarios, report).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "conformance", "faultinject", "loaderspec", "reference")
LEAVES = {
    "loaderspec.vocabulary": "vocabulary",
    "loaderspec.graded": "graded",
    "loaderspec.tracewriter": "tracewriter",
    "loaderspec.fakeaccel": "fakeaccel",
}
DOC = ROOT / "docs" / "architecture.md"
# The suite's packages: folders at the top of the checkout, imported as loaderspec.<name>.
SUITE = ("conformance", "faultinject", "reference")


def node_of(module: str) -> str | None:
    """The graph node a module belongs to (None: not one of ours)."""
    for prefix, node in LEAVES.items():
        if module == prefix or module.startswith(prefix + "."):
            return node
    parts = module.split(".")
    if parts[0] == "loaderspec" and len(parts) > 1 and parts[1] in SUITE:
        parts = parts[1:]  # loaderspec.reference: the checkout's reference/ folder
    return parts[0] if parts[0] in PACKAGES else None


def _is_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "loaderspec" and len(parts) > 1 and parts[1] in SUITE:
        parts = parts[1:]
    path = ROOT / Path(*parts)
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imported(tree: ast.AST) -> set[str]:
    """Every module an import statement names (``from a import b`` names ``a.b`` when ``b`` is a
    module, else ``a``)."""
    found: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            found.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            for alias in n.names:
                sub = f"{n.module}.{alias.name}"
                found.add(sub if _is_module(sub) else n.module)
    return found


def real_graph() -> dict[str, set[str]]:
    """node -> the nodes its modules import."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            src = node_of(module.removesuffix(".__init__"))
            assert src is not None
            targets = {node_of(m) for m in _imported(ast.parse(path.read_text()))}
            graph.setdefault(src, set()).update(t for t in targets if t and t != src)
    return graph


def documented_graph(text: str) -> dict[str, set[str]]:
    """The graph drawn in architecture.md: the ```text block after `<!-- package-graph -->`,
    one line per node: `node -> a, b` (`-> nothing` for a leaf)."""
    block = re.search(r"<!-- package-graph -->\s*```text\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md lost its package graph"
    graph: dict[str, set[str]] = {}
    for line in block.group(1).splitlines():
        if "->" not in line:
            continue
        src, _, dsts = line.partition("->")
        names = {d.strip() for d in dsts.split("#")[0].split(",")}
        graph[src.strip()] = {d for d in names if d and d != "nothing"}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of `graph` as a path of nodes ([] if it has none)."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return []


def test_the_documented_package_graph_is_the_real_one():
    real = real_graph()
    drawn = documented_graph(DOC.read_text())
    nodes = set(real) | set(drawn)
    diff = {n: (sorted(drawn.get(n, set())), sorted(real.get(n, set()))) for n in nodes}
    wrong = {n: f"drawn {d}, imports {r}" for n, (d, r) in diff.items() if d != r}
    assert wrong == {}, "update the package graph in docs/architecture.md"


def test_the_package_graph_has_no_cycle():
    assert cycle(real_graph()) == []


def test_a_drift_or_a_cycle_is_caught():
    drawn = documented_graph("<!-- package-graph -->\n```text\na -> b, c\nb -> nothing\n```")
    assert drawn == {"a": {"b", "c"}, "b": set()}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def module_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (a ``TYPE_CHECKING`` import counts)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).glob("*.py")):
        module = f"{package}.{path.stem}"
        names = _imported(ast.parse(path.read_text()))
        graph[module] = {n for n in names if n.startswith(package + ".") and n != module}
    return graph


def test_no_module_cycle_in_the_reference_loader():
    """``loader.py`` imports the iterators; they take a ``LoaderOptions``, not the loader."""
    assert cycle(module_graph("reference")) == []
