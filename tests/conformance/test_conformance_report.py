"""`loaderspec report`'s matrix from per-loader results, rendered by the suite's one renderer
(the suite runs are covered elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.harness.report import write_matrix
from loaderspec import report


def _case(nodeid: str, outcome: str, figures: list | None = None) -> dict:
    return {
        "nodeid": nodeid,
        "case": nodeid.split("::")[-1],
        "properties": ["ShutdownCompletes"],
        "level": "MUST",
        "outcome": outcome,
        "figures": figures or [],
        "detail": "",
        "duration_s": 0.1,
    }


def test_matrix_lists_every_case_for_every_loader(tmp_path: Path) -> None:
    fig = [{"name": "shutdown_s", "value": 5.02, "unit": "s"}]
    results = {
        "a:L": {
            "cases": [_case("conformance/t.py::x", "PASS"), _case("conformance/t.py::y", "FAIL")]
        },
        "b:L": {"cases": [_case("conformance/t.py::x", "NON-STRICT", fig)]},
        "c:L": None,
    }
    md = write_matrix(tmp_path, results)
    assert (
        "| `t.py::x` | ShutdownCompletes | MUST | PASS | NON-STRICT (shutdown_s 5.02 s) | - |" in md
    )
    assert "| `t.py::y` | ShutdownCompletes | MUST | FAIL | - | - |" in md
    assert "| FAIL | 1 | 0 | 0 |" in md
    data = json.loads((tmp_path / "matrix.json").read_text())
    assert data["loaders"] == ["a:L", "b:L", "c:L"]
    assert data["incomplete"] == ["c:L"]  # it produced no results at all
    assert "<table>" in (tmp_path / "matrix.html").read_text()


def test_a_run_stopped_at_its_limit_is_marked_incomplete(tmp_path: Path) -> None:
    results = {
        "a:L": {"complete": True, "cases": [_case("conformance/t.py::x", "PASS")]},
        "b:L": {"complete": False, "cases": [_case("conformance/t.py::x", "FAIL")]},
    }
    md = write_matrix(tmp_path, results)
    assert "Incomplete runs (stopped at the time limit, or did not start" in md
    assert "`-`: not run): `b:L`" in md
    assert json.loads((tmp_path / "matrix.json").read_text())["incomplete"] == ["b:L"]


def test_default_loaders_start_with_reference_and_torch() -> None:
    loaders = report.default_loaders()
    assert loaders[:2] == ["reference:DataLoader", "torch.utils.data:DataLoader"]


def test_slug_is_a_safe_directory_name() -> None:
    assert report.slug("torch.utils.data:DataLoader") == "torch_utils_data_DataLoader"
