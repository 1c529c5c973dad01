"""The case list of docs/conformance.md, generated from the case files themselves.

``python -m conformance.catalog --write docs/conformance.md`` rewrites the table between the
``cases:begin`` / ``cases:end`` markers; a test checks the page matches, so it cannot go stale.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import conformance.cases

BEGIN, END = "<!-- cases:begin -->", "<!-- cases:end -->"


def cases() -> list[tuple[str, str, list[str], str, str]]:
    """(file, case, properties, description, guards) for every case, in file order."""
    rows = []
    for info in sorted(pkgutil.iter_modules(conformance.cases.__path__), key=lambda m: m.name):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"conformance.cases.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("test_") or fn.__module__ != module.__name__:
                continue
            props = [
                p
                for m in getattr(fn, "pytestmark", [])
                if m.name == "spec_property"
                for p in m.args
            ]
            doc = inspect.getdoc(fn) or ""
            guards = re.search(r"Guards: (.*)", " ".join(doc.split()))
            rows.append(
                (
                    f"{info.name}.py",
                    name,
                    props,
                    " ".join(doc.split("\n\n")[0].split()),
                    guards.group(1) if guards else "",
                )
            )
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
