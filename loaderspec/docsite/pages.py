"""The Markdown the site generates from the code, one function per ``<!-- docsite: ... -->``
directive (``hooks`` calls them) and one for each source page.

Every link into the checkout is written as the repository host would take it, relative to the
page (``up`` leads from the page to the checkout's top: ``"../"`` from ``docs/x.md``), so
``loaderspec.docsite.links`` checks it like a hand-written one. What each generator reads:

* actions: ``loaderspec.vocabulary`` (actors, actions and the comment beside each member),
  ``loaderspec.actionmap.ACTION_CAN_BREAK``, the spec's definitions (``SPEC``), the core's
  methods (``vocabulary.CORE_METHOD`` in ``CORE``), where ``reference/`` and ``faultinject/``
  log each action, and the conformance cases' ``spec_property`` markers
  (``conformance.catalog.cases``);
* properties: ``vocabulary.PROPERTIES``, the spec, the broken variants of the model manifest
  (``loaderspec.modelcheck.load_manifest``), the cases;
* the matrix: ``docs/reports/*/report.json`` through ``conformance.harness.matrix.matrix``;
* the API pages: the public modules of a package, for mkdocstrings.
"""

from __future__ import annotations

import ast
import html
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from loaderspec.actionmap import ACTION_CAN_BREAK
from loaderspec.docsite import sources
from loaderspec.vocabulary import CORE_METHOD, PROPERTIES, Action, Actor

SPEC = "spec/DataLoader.tla"
CORE = "reference/core.py"
VOCABULARY = "loaderspec/vocabulary.py"
# Where the reference loader and the fault injector log each action: calls of these functions
# (loaderspec.tracewriter's, and reference.loop.take, which makes a core call and logs it).
LOGGED_IN = ("reference", "faultinject")
LOG_CALLS = frozenset({"emit", "emit_last", "take", "emit_fault", "_log_moved"})
_MEMBER = re.compile(r'^\s+([A-Z_]+) = "(\w+)"\s+#\s*(.*)$')


def _read(path: str) -> str:
    return (sources.REPO / path).read_text()


@cache
def action_notes() -> dict[str, str]:
    """Action name -> the comment beside its ``Action`` member in the vocabulary."""
    notes = {}
    for line in _read(VOCABULARY).splitlines():
        match = _MEMBER.match(line)
        if match:
            notes[match.group(2)] = match.group(3)
    return notes


def _is_action(node: ast.expr, names: dict[str, str]) -> bool:
    """``Action.MEMBER``."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Action"
        and node.attr in names
    )


def _action_aliases(tree: ast.Module, names: dict[str, str]) -> dict[str, str]:
    """Module-level names bound to actions (``_GET = Action.MAIN_GET_DATA``, or several in one
    tuple assignment), which the per-batch path logs through: name -> action name."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = (
            list(zip(target.elts, value.elts, strict=False))
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
            else [(target, value)]
        )
        for t, v in pairs:
            if isinstance(t, ast.Name) and _is_action(v, names):
                # _is_action(v) has checked that v is an ast.Attribute.
                aliases[t.id] = names[v.attr]  # type: ignore[attr-defined]
    return aliases


@cache
def logged_at() -> dict[str, list[tuple[str, int]]]:
    """Action name -> (file, line) of each ``LOG_CALLS`` call in ``LOGGED_IN`` that passes the
    action, as ``Action.MEMBER`` or as its name (``tracing.emit("WorkerFetch", ...)``)."""
    names = {a.name: a.value for a in Action}
    values = set(names.values())
    out: dict[str, list[tuple[str, int]]] = {}
    for path in sources.published_files():
        if not path.startswith(LOGGED_IN) or not path.endswith(".py"):
            continue
        tree = ast.parse(_read(path))
        aliases = _action_aliases(tree, names)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in LOG_CALLS:
                continue
            for arg in node.args:
                value = None
                if isinstance(arg, ast.Constant) and arg.value in values:
                    value = arg.value
                elif isinstance(arg, ast.Name) and arg.id in aliases:
                    value = aliases[arg.id]
                elif _is_action(arg, names):
                    value = names[arg.attr]  # type: ignore[attr-defined]  # (as above)
                if value is not None:
                    out.setdefault(value, []).append((path, node.lineno))
    return {k: sorted(set(v)) for k, v in out.items()}


@cache
def core_methods() -> dict[str, str]:
    """Method name -> qualified name of the core's method (``ProtocolCore.try_put_index``)."""
    symbols = sources.python_symbols(_read(CORE))
    return {q.rsplit(".", 1)[-1]: q for q in symbols if "." in q}


@cache
def cases_by_property() -> dict[str, list[tuple[str, str]]]:
    """Property -> (file, case) of every conformance case marked with it."""
    from loaderspec.conformance import (
        catalog,  # imports the cases (and torch): only when a page asks
    )

    out: dict[str, list[tuple[str, str]]] = {}
    for file, case, props, _desc, _guards in catalog.cases():
        for prop in props:
            out.setdefault(prop, []).append((file, case))
    return out


def case_link(file: str, case: str, up: str) -> str:
    return f"[`{case}`]({up}conformance/cases/{file}#{case})"


def _spec_link(name: str, up: str) -> str:
    if name not in sources.tla_definitions(_read(SPEC)):
        return "no formula (checked by the suite only)"
    span = sources.span(SPEC, name)
    return f"[`{name}`]({up}{SPEC}#{name}) (lines {span.start}-{span.end})"


def _core_link(action: Action, up: str) -> str:
    method = CORE_METHOD.get(action)
    if method is None:
        return ""
    qualified = core_methods().get(method)
    if qualified is None:
        raise LookupError(
            f"{CORE} has no method {method!r} (vocabulary.CORE_METHOD[{action.name}])"
        )
    return f"[`{qualified}`]({up}{CORE}#{qualified})"


def _logged_links(action: Action, up: str) -> str:
    return ", ".join(
        f"[{path.split('/', 1)[1]}:{line}]({up}{path}#L{line})"
        for path, line in logged_at().get(action.value, [])
    )


def _sentence(note: str) -> str:
    note = note.strip().rstrip(".")
    return note[:1].upper() + note[1:] + "." if note else ""


def actions(actor: Actor, up: str) -> str:
    """One section per action of ``actor``: what it does, its spec lines, its core method,
    where it is logged, the properties it can break and the cases that check them."""
    cases = cases_by_property()
    out = []
    for action in Action:
        if action.actor is not actor:
            continue
        props = sorted(p.value for p in ACTION_CAN_BREAK[action])
        checked = [
            f"{prop}: " + ", ".join(case_link(f, c, up) for f, c in cases.get(prop, []))
            for prop in props
            if cases.get(prop)
        ]
        lines = [
            f"### {action.value} {{ #{action.value} }}",
            "",
            _sentence(action_notes().get(action.value, "")),
            "",
            f"- spec: {_spec_link(action.value, up)}",
        ]
        core = _core_link(action, up)
        if core:
            lines.append(f"- core: {core}")
        logged = _logged_links(action, up)
        lines.append(f"- logged: {logged}" if logged else "- logged: nowhere yet")
        lines.append("- can break: " + ", ".join(f"[{p}](#{p})" for p in props))
        lines += [f"- checked by {line}" for line in checked] or ["- checked by: no case yet"]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _broken_variants() -> dict[str, list[str]]:
    """Property -> the name of every broken model of the manifest that violates it (each
    variant lists the full set it violates; its table in ``spec/models.toml`` is its source)."""
    from loaderspec.manifest import load_manifest

    out: dict[str, list[str]] = {}
    for model in load_manifest():
        for prop in sorted(model.violates):
            out.setdefault(prop, []).append(model.name)
    return out


def properties(up: str) -> str:
    """One section per spec property: level, claim, formula, broken variants, the actions that
    can break it, and the cases that check it."""
    cases = cases_by_property()
    broken = _broken_variants()
    out = []
    for prop in PROPERTIES:
        breakers = [a.value for a in Action if prop.prop in ACTION_CAN_BREAK[a]]
        manifest = f"{up}spec/models.toml"
        variants = ", ".join(f"[`{name}`]({manifest})" for name in broken.get(prop.name, []))
        lines = [
            f"### {prop.name} {{ #{prop.name} }}",
            "",
            f"**{prop.level.value}**, {prop.check.value}. {prop.claim}",
            "",
            f"- spec: {_spec_link(prop.name, up)}",
            f"- broken variants: {variants or 'none'}",
            "- actions that can break it: " + ", ".join(f"[{a}](#{a})" for a in breakers),
            "- cases: "
            + (
                ", ".join(case_link(f, c, up) for f, c in cases.get(prop.name, []))
                or (f"none, spec-only: {prop.spec_only}" if prop.spec_only else "none")
            ),
        ]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _breakable(name: str) -> str:
    """A long identifier as code that may wrap after each underscore."""
    return "<code>" + html.escape(name).replace("_", "_<wbr>") + "</code>"


def _outcome(case: dict | None) -> str:
    if case is None:
        return "-"
    return f'<span class="ls-{case["outcome"].lower()}">{case["outcome"]}</span>'


def matrix(reports: Path, up: str, reports_url: str) -> str:
    """The conformance matrix of every ``reports/*/report.json``: totals per loader, every case
    by loader, and each non-PASS with the detail its report gives."""
    from loaderspec import report
    from loaderspec.conformance.harness import matrix as renderer

    short_name = renderer.short_name
    results = {}
    slugs = {}
    for path in sorted(reports.glob("*/report.json")):
        data = report.load_results(path)
        results[data["loader"]] = data
        slugs[data["loader"]] = path.parent.name
    if not results:
        raise LookupError(f"{reports}: no */report.json (make them with `loaderspec report`)")
    first = list(report.DEFAULT_LOADERS)  # the reference loader and torch, then the others
    order = sorted(results, key=lambda x: (first.index(x) if x in first else len(first), x))
    m = renderer.matrix({x: results[x] for x in order})
    loaders = m["loaders"]
    outcomes = ("PASS", "FAIL", "NON-STRICT", "SKIP")
    lines = ["| loader | " + " | ".join(outcomes) + " | report |", "| --- " * 6 + "|"]
    for loader in loaders:
        counts = [
            sum(1 for row in m["cases"] if (row["by_loader"][loader] or {}).get("outcome") == o)
            for o in outcomes
        ]
        when = results[loader].get("started", "")[:10]
        url = f"{reports_url}{slugs[loader]}/report.html"
        lines.append(
            f"| **{short_name(loader)}**: `{loader}` | "
            + " | ".join(map(str, counts))
            + f" | [report.html]({url}) ({when}) |"
        )
    head = " | ".join(short_name(x) for x in loaders)
    lines += ["", f"| case | properties | {head} |", "| --- | --- | " + "--- | " * len(loaders)]
    for row in m["cases"]:
        file, case = row["file"], row["case"]
        name = case.split("[", 1)[0]
        cells = [_outcome(row["by_loader"][x]) for x in loaders]
        lines.append(
            f"| [{_breakable(case)}]({up}{file}#{name}) | {', '.join(row['properties'])} | "
            + " | ".join(cells)
            + " |"
        )
    lines += ["", "## Every outcome other than PASS", ""]
    for loader in loaders:
        lines += [f"### {short_name(loader)}", ""]
        found = False
        for row in m["cases"]:
            case = row["by_loader"][loader]
            if case is None or case["outcome"] == "PASS":
                continue
            found = True
            figures = ", ".join(f"{f['name']} {f['value']:g} {f['unit']}" for f in case["figures"])
            detail = _plain(" ".join(str(case.get("detail", "")).split()) or "no detail recorded")
            lines.append(
                f"- {_outcome(case)} `{row['case']}`"
                + (f" ({figures})" if figures else "")
                + f": {detail}"
            )
        lines += ([] if found else ["Every case passed."]) + [""]
    return "\n".join(lines)


def _plain(text: str) -> str:
    """Text that Markdown shows as it is (a report's detail quotes code, paths and <reprs>)."""
    return re.sub(r"([\\`*_\[\]])", r"\\\1", html.escape(text, quote=False))


def public_modules(package: str) -> list[str]:
    """The package and its public modules (no leading underscore; no test modules), dotted."""
    folder = sources.REPO / package.replace(".", "/")
    if not (folder / "__init__.py").is_file():
        raise LookupError(f"{package}: not a package of the checkout")
    names = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith(("_", "test_")))
    return [package] + [f"{package}.{name}" for name in names]


def api(package: str, skip: Iterable[str] = ()) -> str:
    """mkdocstrings blocks for ``package`` (its docstring only: what it re-exports is shown
    with the module that defines it) and its public modules (less ``skip``)."""
    package_block = f"::: {package}\n    options:\n      members: false"
    modules = [f"::: {name}" for name in public_modules(package)[1:] if name not in set(skip)]
    return "\n\n".join([package_block, *modules]) + "\n"


def source_page(file: Path, path: str) -> str:
    """The page that shows checkout file ``path`` (at ``file``) with numbered, linkable lines."""
    text = file.read_text()
    lang = {".py": "python", ".toml": "toml", ".cfg": "text", ".tla": "text"}.get(
        Path(path).suffix, "text"
    )
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return (
        "---\nsearch:\n  exclude: true\nhide:\n  - toc\n---\n\n"
        f'# {path}\n\n{fence}{lang} linenums="1"\n{text.rstrip()}\n{fence}\n'
    )


def source_index(paths: Iterable[str], link_dir: str) -> str:
    """The list of source pages, by folder (``link_dir`` leads from the index to them)."""
    lines = ["# Source files", "", "Every checkout file the pages link to, with numbered lines."]
    folder = None
    for path in paths:
        parent = path.rsplit("/", 1)[0]
        if parent != folder:
            folder = parent
            lines += ["", f"## {folder}/", ""]
        lines.append(f"- [{path.rsplit('/', 1)[1]}]({link_dir}{path}.md)")
    return "\n".join(lines) + "\n"
