"""docs/faultinject.md's standalone example runs as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "faultinject.md"

pytestmark = pytest.mark.timeout(120)


def _example() -> str:
    match = re.search(r"<!-- example: standalone -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, "docs/faultinject.md lost its standalone example"
    return match.group(1)


def test_the_standalone_example_runs(tmp_path, capsys):
    # A module of its own, so the sandbox (fork) can pickle `scenario` by reference.
    module = types.ModuleType("faultinject_docs_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(_example(), str(DOC), "exec"), module.__dict__)
        report, fault = module.main(tmp_path)
    finally:
        del sys.modules[module.__name__]
    assert report.outcome == "returned", report.error
    assert fault.index == 5
    assert fault.pid in report.value["workers"]
    assert report.value["error"] is not None
    assert 5 not in report.value["got"]
    assert "returned" in capsys.readouterr().out
