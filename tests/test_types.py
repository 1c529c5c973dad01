"""The type checker's part of the test command: what it checks, and every ignore's reason.

mypy runs in ``scripts/test.sh`` (``[tool.mypy]`` in pyproject.toml: the packages, strict on the
pure cores and the vocabulary). Here: each ``# type: ignore[code]`` left in the tree says why,
in a comment on its line or on the line above, so an ignore is a decision, not a silenced error.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
