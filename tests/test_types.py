"""The type checker's part of the test command: what it checks, that it can fail, and every
ignore's reason.

mypy runs in ``scripts/test.sh`` (``[tool.mypy]`` in pyproject.toml: every package under its
import name, from the layout scripts/setup.sh stages in build/mypy; strict on the pure cores, the
vocabulary, the checkpoint code and faultinject). Here: mypy reports an untyped def added to each
strict module and a wrong type passed from one package to another, and sees an imported core
type as that type (not ``Any``: a check that cannot fail would say the cores are typed when they
are not); each ``# type: ignore[code]`` left in the tree says why, in a comment on its line or on
the line above, so an ignore is a decision, not a silenced error.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIR: dict[str, str] = CONFIG["tool"]["setuptools"]["package-dir"]
STAGE = ROOT / "build" / "mypy"
# The modules that must stay strict: the pure cores, the vocabulary, the checkpoint code and the
# fault-injection harness's plan, events and driver (all of faultinject is, today).
STRICT_AT_LEAST = (
    "loaderspec.reference.core",
    "loaderspec.reference.transitions",
    "loaderspec.reference.guards",
    "loaderspec.reference.proposals",
    "loaderspec.reference.steps",
    "loaderspec.reference.worker_core",
    "loaderspec.reference.messages",
    "loaderspec.reference.loop",
    "loaderspec.reference.checkpoint",
    "loaderspec.vocabulary",
    "loaderspec.faultinject.plan",
    "loaderspec.faultinject.events",
    "loaderspec.faultinject.driver",
)
# Appended to a strict module's shadow copy: a def with no annotations.
UNTYPED = "\n\ndef _untyped_probe(x):\n    return x\n"
# Appended to a non-strict module of one package: a type of another package's core, revealed and
# given a str.
ACROSS = """

from loaderspec.reference.core import ProtocolCore as _ProbeCore


def _across_probe(core: _ProbeCore) -> None:
    reveal_type(core)


_across_probe("not a core")
"""
ACROSS_MODULE = "loaderspec.conformance.harness.checks"
CORE_TYPE = "loaderspec.reference.core.ProtocolCore"
# mypy without the virtualenv's site-packages: torch's analysis is most of a cold run (11 of 14 s
# CPU on the shared machine); loaderspec's own modules come from mypy_path. The third-party
# imports it cannot find then add errors of their own, which this test does not read.
CHEAP = ("--no-site-packages",)
_REPORT = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")
PACKAGES = ("bench", "conformance", "faultinject", "loaderspec", "reference", "tests")
_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


def unexplained_ignores(paths: list[Path]) -> list[str]:
    """``path:line`` of each ``# type: ignore`` with no reason beside it or on the line above."""
    found = []
    for path in paths:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = _IGNORE.search(line)
            if m is None or "_IGNORE" in line:
                continue
            beside = m.group("rest").strip().lstrip("#").strip()
            above = lines[i - 1] if i else ""
            if not beside and "#" not in above:
                found.append(f"{path.relative_to(ROOT)}:{i + 1}")
    return found


def strict_modules() -> list[str]:
    """The modules of [tool.mypy]'s strict override, its ``X.*`` patterns expanded."""
    (strict,) = [o for o in CONFIG["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs")]
    every = [module_of(path) for path in source_files()]
    # mypy's "X.*" is X and its submodules
    found = {
        pattern: [m for m in every if fnmatch.fnmatch(m, pattern) or f"{m}.*" == pattern]
        for pattern in strict["module"]
    }
    assert [p for p, matched in found.items() if not matched] == [], "names no module"
    return sorted({m for matched in found.values() for m in matched})


def source_files() -> list[Path]:
    """Each module's file as mypy finds it: the checkout's loaderspec/, the staged folders."""
    tops = [ROOT / "loaderspec", *(STAGE / "loaderspec" / n.split(".")[1] for n in PACKAGE_DIR)]
    return [p for top in tops for p in top.rglob("*.py") if "__pycache__" not in p.parts]


def module_of(path: Path) -> str:
    base = STAGE if path.is_relative_to(STAGE) else ROOT
    return ".".join(path.relative_to(base).with_suffix("").parts).removesuffix(".__init__")


def path_of(module: str) -> Path:
    (path,) = [p for p in source_files() if module_of(p) == module]
    return path


def test_mypy_sees_every_package_under_its_import_name():
    """Each folder that package-dir maps into loaderspec is in mypy's packages and staged."""
    packages = CONFIG["tool"]["mypy"]["packages"]
    assert sorted(PACKAGE_DIR) == sorted(p for p in packages if p.count(".") == 1)
    for name, folder in PACKAGE_DIR.items():
        staged = STAGE / "loaderspec" / name.split(".")[1]
        assert staged.resolve() == (ROOT / folder).resolve(), "run bash scripts/setup.sh"


def test_mypy_can_fail(tmp_path):
    """An untyped def in each strict module, and a str passed where another package's core type
    is expected, are reported; that type, imported, is itself (not Any). Each file mypy reads is
    a shadow copy (--shadow-file): the tree is never written."""
    pytest.importorskip("mypy")
    modules = strict_modules()
    assert set(STRICT_AT_LEAST) <= set(modules)
    shadows: list[str] = []
    expected: set[tuple[str, int, str]] = set()
    for module in [*modules, ACROSS_MODULE]:
        source = path_of(module)
        text = source.read_text()
        added = ACROSS if module == ACROSS_MODULE else UNTYPED
        shadow = tmp_path / f"{module}.py"
        shadow.write_text(text + added)
        shadows += ["--shadow-file", str(source), str(shadow)]
        at = text.count("\n") + 1  # the first added line
        shown = str(source.relative_to(ROOT))
        if module == ACROSS_MODULE:
            expected.add((shown, at + 6, f'note: Revealed type is "{CORE_TYPE}"'))
            expected.add((shown, at + 9, "error: [arg-type]"))
        else:
            expected.add((shown, at + 2, "error: [no-untyped-def]"))
    targets = [a for m in [*modules, ACROSS_MODULE] for a in ("-m", m)]
    cache = ("--cache-dir", str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *CHEAP, *cache, *targets, *shadows],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    ).stdout
    found = set()
    for line in out.splitlines():
        m = _REPORT.match(line)
        if m is None:
            continue
        code = re.search(r"\[([a-z-]+)\]$", m["text"])
        text = m["text"] if code is None or m["kind"] == "note" else f"[{code[1]}]"
        found.add((m["path"], int(m["line"]), f"{m['kind']}: {text}"))
    assert expected - found == set(), out


def test_every_type_ignore_says_why():
    paths = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert unexplained_ignores(paths) == []


def test_the_check_finds_a_bare_ignore(tmp_path):
    bare = tmp_path / "m.py"
    bare.write_text("x = 1\ny: str = x  # type: ignore[assignment]\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert unexplained_ignores([bare]) == ["m.py:2"]
        bare.write_text("x = 1\n# ints stand in for strs here\ny: str = x  # type: ignore\n")
        assert unexplained_ignores([bare]) == []
    finally:
        ROOT = saved
