"""The checkout's files as the site publishes them, and the lines a link into them names.

Owns which files get a source page (``PUBLISHED``), and resolving a link's fragment to a span
of lines: ``L12`` or ``L12-L20`` (GitHub's form), or a symbol, so that a page can link to a
definition without a line number that rots: a Python qualified name (``ProtocolCore.try_put_index``,
``PHASE_TRANSITIONS``, ``test_idle_worker_killed_raises``) or a TLA+ operator (``MainGetData``,
``InOrderDelivery``). Knows nothing of MkDocs.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Globs, relative to the checkout, of the files that get a page under source/ on the site.
PUBLISHED: tuple[str, ...] = (
    "spec/*.tla",
    "spec/*.cfg",
    "spec/models.toml",
    "reference/*.py",
    "faultinject/*.py",
    "conformance/*.py",
    "conformance/adapters/*.py",
    "conformance/cases/*.py",
    "conformance/harness/*.py",
    "loaderspec/*.py",
    "loaderspec/docsite/*.py",
    "bench/*.py",
)

# A TLA+ operator definition at the start of a line: `Name ==` or `Name(a, b) ==`.
_TLA_DEF = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*==")
_LINES = re.compile(r"^L(\d+)(?:-L?(\d+))?$")


class LinkError(ValueError):
    """A link into the checkout names a file, line or symbol that is not there."""


@dataclass(frozen=True)
class Span:
    """Lines ``start`` to ``end`` of a file, 1-based and inclusive."""

    start: int
    end: int


def published_files(root: Path = REPO) -> list[str]:
    """Every published file, as a POSIX path relative to ``root``, sorted."""
    return sorted(_published(root))


@cache
def _published(root: Path) -> frozenset[str]:
    return frozenset(
        path.relative_to(root).as_posix()
        for pattern in PUBLISHED
        for path in root.glob(pattern)
        if path.is_file()
    )


def python_symbols(text: str) -> dict[str, Span]:
    """Qualified name -> lines (decorators included) of every class, function and module-level
    assignment of a Python source."""
    out: dict[str, Span] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                name = prefix + node.name
                out[name] = Span(first, node.end_lineno or node.lineno)
                if isinstance(node, ast.ClassDef):
                    visit(node.body, name + ".")
            elif isinstance(node, ast.Assign | ast.AnnAssign) and not prefix:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = Span(node.lineno, node.end_lineno or node.lineno)

    visit(ast.parse(text).body, "")
    return out


def tla_definitions(text: str) -> dict[str, Span]:
    """Operator name -> lines of every top-level definition of a TLA+ module: from its
    ``Name ==`` line to the last non-blank line before the next line that starts in column 0."""
    lines = text.splitlines()
    out: dict[str, Span] = {}
    for number, line in enumerate(lines, start=1):
        match = _TLA_DEF.match(line)
        if not match:
            continue
        end = number
        for later in range(number, len(lines)):  # `later` is the 0-based index of line later+1
            following = lines[later]
            if following.strip() and not following[0].isspace():
                break
            if following.strip():
                end = later + 1
        out[match.group(1)] = Span(number, end)
    return out


@cache
def _text(path: Path) -> str:
    return path.read_text()


@cache
def _symbols(suffix: str, text: str) -> dict[str, Span]:
    if suffix == ".py":
        return python_symbols(text)
    if suffix == ".tla":
        return tla_definitions(text)
    return {}


def span(path: str, fragment: str, root: Path = REPO) -> Span:
    """The lines that ``path#fragment`` names (the whole file for an empty fragment).

    Raises:
        LinkError: the file is not published, a line is past its end, or the symbol is not
            defined in it; the message names the link and what the file does define.
    """
    if path not in _published(root):
        raise LinkError(f"{path}: not a published source file (published: {', '.join(PUBLISHED)})")
    text = _text(root / path)
    count = max(1, len(text.splitlines()))
    if not fragment:
        return Span(1, count)
    lines = _LINES.match(fragment)
    if lines:
        start = int(lines.group(1))
        end = int(lines.group(2) or start)
        if not 1 <= start <= end <= count:
            raise LinkError(f"{path}#{fragment}: the file has lines 1-{count}")
        return Span(start, end)
    symbols = _symbols(Path(path).suffix, text)
    if fragment not in symbols:
        close = difflib.get_close_matches(fragment, list(symbols), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "link to lines: #L12-L20"
        raise LinkError(f"{path}#{fragment}: no such definition in the file ({hint})")
    return symbols[fragment]
