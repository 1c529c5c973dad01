"""Rendering conformance results: one loader's report and the matrix of several, as Markdown
and HTML, and writing them.

`report.json` (the contract in docs/contracts.md) is the data; everything here is a pure function
of it, so the plugin (`write_report`, once at the end of a run) and `loaderspec report`
(`write_matrix`) render with the same code and the same colours.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from conformance.harness.grading import OUTCOMES

__all__ = [
    "COLORS",
    "counts",
    "matrix",
    "matrix_html",
    "matrix_markdown",
    "report_html",
    "report_markdown",
    "slowest",
    "write_json",
    "write_matrix",
    "write_report",
]

COLORS = {"PASS": "#c8e6c9", "FAIL": "#ffcdd2", "NON-STRICT": "#fff9c4", "SKIP": "#e0e0e0"}
_STYLE = (
    "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:3px 6px;"
    "vertical-align:top}table{border-collapse:collapse}</style>"
)


def counts(cases: list[dict[str, Any]]) -> dict[str, int]:
    """Cases per outcome, every outcome listed."""
    out = dict.fromkeys(OUTCOMES, 0)
    for case in cases:
        out[case["outcome"]] = out.get(case["outcome"], 0) + 1
    return out


def slowest(cases: list[dict[str, Any]], k: int = 5) -> str:
    """The `k` slowest cases of a run, one line ("" for none): where a run's time went."""
    timed = sorted(cases, key=lambda c: -c.get("duration_s", 0.0))[:k]
    return ", ".join(f"{c['case']} {c.get('duration_s', 0.0):.1f} s" for c in timed)


def _figures(case: dict[str, Any], sep: str = "=") -> str:
    return ", ".join(f"{f['name']}{sep}{f['value']:g} {f['unit']}" for f in case["figures"])


def _cell(case: dict[str, Any] | None) -> str:
    """One loader's outcome of one case in the matrix ("-": not run)."""
    if case is None:
        return "-"
    figures = _figures(case, " ")
    return case["outcome"] + (f" ({figures})" if figures else "")


def _page(title: str, body: str) -> str:
    title = html.escape(title)
    head = f"<!doctype html><meta charset=utf-8><title>{title}</title>{_STYLE}"
    return f"{head}<h1>{title}</h1>{body}\n"


def _table(head: list[str], rows: list[str]) -> str:
    return (
        "<table><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )


# --------------------------------------------------------------------------- one loader


def report_markdown(results: dict[str, Any]) -> str:
    c = counts(results["cases"])
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
        f"Slowest cases: {slowest(results['cases'])}.",
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


def report_html(results: dict[str, Any]) -> str:
    rows = []
    for case in results["cases"]:
        color = COLORS.get(case["outcome"], "#fff")
        cells = [
            f"<code>{html.escape(case['case'])}</code>",
            html.escape(", ".join(case["properties"])),
            case["level"],
            f'<b style="background:{color}">{case["outcome"]}</b>',
            html.escape(_figures(case)),
            html.escape(case["detail"][:500]),
        ]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    summary = " · ".join(f"{k}: {v}" for k, v in counts(results["cases"]).items())
    head = ["case", "properties", "level", "outcome", "figures", "detail"]
    body = (
        f"<p>from {html.escape(results['loader_source'])}, run {html.escape(results['started'])}"
        f"</p><p>{summary}</p><p>Slowest cases: {html.escape(slowest(results['cases']))}</p>"
        + _table(head, rows)
    )
    return _page(f"Conformance report: {results['loader']}", body)


def write_json(directory: Path, results: dict[str, Any]) -> None:
    """Write `report.json` into `directory` (created); rewritten after every case of a run."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(results, indent=1) + "\n")


def write_report(directory: Path, results: dict[str, Any]) -> None:
    """Write report.json, report.md and report.html into `directory` (created)."""
    write_json(directory, results)
    (directory / "report.md").write_text(report_markdown(results))
    (directory / "report.html").write_text(report_html(results))


# --------------------------------------------------------------------------- several loaders


def matrix(results: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """{loaders, incomplete, cases: [{nodeid, case, properties, level, by_loader: {loader:
    case | None}}]} from each loader's report.json (None: the loader produced none)."""
    rows: dict[str, dict[str, Any]] = {}
    for loader, res in results.items():
        for case in (res or {}).get("cases", []):
            row = rows.setdefault(
                case["nodeid"],
                {k: case[k] for k in ("nodeid", "case", "properties", "level")} | {"by_loader": {}},
            )
            row["by_loader"][loader] = case
    loaders = list(results)
    for row in rows.values():
        for loader in loaders:
            row["by_loader"].setdefault(loader, None)
    # A run stopped from outside (past its time limit) keeps the cases it finished; "-" marks
    # the rest.
    incomplete = [x for x, res in results.items() if res is None or not res.get("complete", True)]
    return {
        "loaders": loaders,
        "incomplete": incomplete,
        "cases": sorted(rows.values(), key=lambda r: r["nodeid"]),
    }


def matrix_markdown(m: dict[str, Any]) -> str:
    loaders = m["loaders"]
    lines = [
        "# Conformance matrix",
        "",
        *(
            [
                "Incomplete runs (stopped at the time limit, or did not start: see their"
                " pytest-output.txt; `-`: not run): "
                + ", ".join(f"`{x}`" for x in m.get("incomplete", [])),
                "",
            ]
            if m.get("incomplete")
            else []
        ),
        "| case | properties | level | " + " | ".join(f"`{x}`" for x in loaders) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in loaders) + " |",
    ]
    for row in m["cases"]:
        cells = [_cell(row["by_loader"][x]) for x in loaders]
        file = row["nodeid"].split("::")[0].rsplit("/", 1)[-1]
        lines.append(
            f"| `{file}::{row['case']}` | {', '.join(row['properties'])} | {row['level']} | "
            + " | ".join(cells)
            + " |"
        )
    totals = {
        x: counts([c for row in m["cases"] if (c := row["by_loader"][x]) is not None])
        for x in loaders
    }
    lines += ["", "| totals | " + " | ".join(f"`{x}`" for x in loaders) + " |"]
    lines.append("| --- | " + " | ".join("---" for _ in loaders) + " |")
    for outcome in OUTCOMES:
        lines.append(
            f"| {outcome} | " + " | ".join(str(totals[x][outcome]) for x in loaders) + " |"
        )
    return "\n".join(lines) + "\n"


def matrix_html(m: dict[str, Any]) -> str:
    rows = []
    for row in m["cases"]:
        cells = []
        for x in m["loaders"]:
            case = row["by_loader"][x]
            color = COLORS.get(case["outcome"], "#fff") if case else "#fff"
            title = html.escape(case["detail"]) if case else ""
            cells.append(
                f'<td style="background:{color}" title="{title}">{html.escape(_cell(case))}</td>'
            )
        rows.append(
            f"<tr><td><code>{html.escape(row['case'])}</code></td>"
            f"<td>{html.escape(', '.join(row['properties']))}</td><td>{row['level']}</td>"
            + "".join(cells)
            + "</tr>"
        )
    return _page("Conformance matrix", _table(["case", "properties", "level", *m["loaders"]], rows))


def write_matrix(out: Path, results: dict[str, dict[str, Any] | None]) -> str:
    """Write matrix.json, matrix.md and matrix.html into `out`; return the Markdown."""
    m = matrix(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(m, indent=1) + "\n")
    md = matrix_markdown(m)
    (out / "matrix.md").write_text(md)
    (out / "matrix.html").write_text(matrix_html(m))
    return md
