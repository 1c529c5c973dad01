"""The case list of docs/conformance.md, generated from the case files themselves.

``python -m loaderspec.conformance.catalog --write docs/conformance.md`` rewrites the table
between the ``cases:begin`` / ``cases:end`` markers; a test checks the page matches, so it
cannot go stale.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from loaderspec.conformance import cases as _cases

BEGIN, END = "<!-- cases:begin -->", "<!-- cases:end -->"


def functions() -> Iterator[tuple[str, Callable[..., Any]]]:
    """(case file's module name, case function) for every case of the suite, in file order."""
    for info in sorted(pkgutil.iter_modules(_cases.__path__), key=lambda m: m.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"loaderspec.conformance.cases.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_") and fn.__module__ == module.__name__:
                yield info.name, fn


def properties(fn: Callable[..., Any]) -> list[str]:
    """The spec properties a case function is marked with, in marker order."""
    return [p for m in getattr(fn, "pytestmark", []) if m.name == "spec_property" for p in m.args]


def guards(fn: Callable[..., Any]) -> str:
    """The public issues a case guards against: its docstring's ``Guards:`` line ("" if none)."""
    found = re.search(r"Guards: (.*)", " ".join((inspect.getdoc(fn) or "").split()))
    return found.group(1) if found else ""


def failure_modes(guards_line: str) -> list[str]:
    """The FAILURE-MODES.md entry ids (``B1``, ``G2``) a ``Guards:`` line names."""
    return list(dict.fromkeys(re.findall(r"\b([A-K]\d+)\b", guards_line)))


# A Guards: line names issues as owner/repo#N, "pytorch#N", "pytorch PR #N", or a bare "#N" /
# "PR #N" after an earlier owner/repo in the same line (the repository it continues).
_ISSUE = re.compile(r"(?:\b([\w.-]+/[\w.-]+|pytorch|Paddle)\b)?( PR)? ?#(\d+)")
_SHORT = {"pytorch": "pytorch/pytorch", "Paddle": "PaddlePaddle/Paddle"}


def issue_segments(guards_line: str) -> list[tuple[str, str | None]]:
    """A ``Guards:`` line cut into (text, URL or None) pieces, one piece per public issue or PR it
    names, so a report can link straight to each. A "PR" goes to /pull/, an issue to /issues/; a
    bare ``#N`` takes the repository named before it in the line."""
    pieces: list[tuple[str, str | None]] = []
    repo, at = "", 0
    for m in _ISSUE.finditer(guards_line):
        named, pr, number = m.groups()
        repo = _SHORT.get(named or "", named or repo)
        if not repo:
            continue
        start = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
        pieces += [(guards_line[at:start], None)] if start > at else []
        kind = "pull" if pr else "issues"
        pieces.append((guards_line[start : m.end()], f"https://github.com/{repo}/{kind}/{number}"))
        at = m.end()
    return pieces + ([(guards_line[at:], None)] if at < len(guards_line) else [])


def cases() -> list[tuple[str, str, list[str], str, str]]:
    """(file, case, properties, description, guards) for every case, in file order."""
    rows = []
    for module, fn in functions():
        doc = inspect.getdoc(fn) or ""
        description = " ".join(doc.split("\n\n")[0].split())
        rows.append((f"{module}.py", fn.__name__, properties(fn), description, guards(fn)))
    return rows


def table() -> str:
    lines = ["| file | case | properties | what it checks | guards against |", "| --- " * 5 + "|"]
    for file, name, props, desc, guards in cases():
        lines.append(f"| {file} | `{name}` | {', '.join(props)} | {desc} | {guards} |")
    return "\n".join(lines)


def render(page: str) -> str:
    """``page`` with the table between the markers replaced by the current one."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="rewrite the table in this Markdown page")
    args = parser.parse_args()
    if args.write:
        args.write.write_text(render(args.write.read_text()))
    else:
        print(table())


if __name__ == "__main__":
    main()
