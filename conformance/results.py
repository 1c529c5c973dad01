"""The per-loader report: ``report.json`` (the contract in docs/contracts.md), ``report.md`` and
``report.html``. Pure functions of the results dict, so ``loaderspec report`` reuses them."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from conformance.grading import OUTCOMES

_COLORS = {"PASS": "#c8e6c9", "FAIL": "#ffcdd2", "NON-STRICT": "#fff9c4", "SKIP": "#e0e0e0"}


def counts(results: dict[str, Any]) -> dict[str, int]:
    out = dict.fromkeys(OUTCOMES, 0)
    for case in results["cases"]:
        out[case["outcome"]] = out.get(case["outcome"], 0) + 1
    return out


def _figures(case: dict[str, Any]) -> str:
    return ", ".join(f"{f['name']}={f['value']:g} {f['unit']}" for f in case["figures"])


def to_markdown(results: dict[str, Any]) -> str:
    c = counts(results)
    lines = [
        f"# Conformance report: `{results['loader']}`",
        "",
        f"Loader `{results['loader']}` (from {results['loader_source']}),"
        f" run {results['started']}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(results["versions"].items())) + ".",
        "",
        *(
            []
            if results.get("complete", True)
            else ["**Incomplete run**: the run was stopped before every case had finished.", ""]
        ),
        " · ".join(f"**{k}** {v}" for k, v in c.items()),
        "",
        "| case | properties | level | outcome | figures | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case in results["cases"]:
        detail = case["detail"].replace("|", "\\|").replace("\n", " ")[:300]
        lines.append(
            f"| `{case['case']}` | {', '.join(case['properties'])} | {case['level']} | "
            f"{case['outcome']} | {_figures(case)} | {detail} |"
        )
    return "\n".join(lines) + "\n"


def to_html(results: dict[str, Any]) -> str:
    c = counts(results)
    rows = []
    for case in results["cases"]:
        color = _COLORS.get(case["outcome"], "#fff")
        cells = [
            f"<code>{html.escape(case['case'])}</code>",
            html.escape(", ".join(case["properties"])),
            case["level"],
            f'<b style="background:{color}">{case["outcome"]}</b>',
            html.escape(_figures(case)),
            html.escape(case["detail"][:500]),
        ]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    summary = " · ".join(f"{k}: {v}" for k, v in c.items())
    title = html.escape(f"Conformance report: {results['loader']}")
    return (
        f"<!doctype html><meta charset=utf-8><title>{title}</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:3px 6px;"
        "vertical-align:top}table{border-collapse:collapse}</style>"
        f"<h1>{title}</h1><p>from {html.escape(results['loader_source'])}, "
        f"run {html.escape(results['started'])}</p><p>{summary}</p>"
        "<table><tr><th>case</th><th>properties</th><th>level</th><th>outcome</th>"
        "<th>figures</th><th>detail</th></tr>" + "".join(rows) + "</table>\n"
    )


def write(directory: Path, results: dict[str, Any]) -> None:
    """Write report.json, report.md and report.html into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(results, indent=1) + "\n")
    (directory / "report.md").write_text(to_markdown(results))
    (directory / "report.html").write_text(to_html(results))
