"""Rendering one loader's conformance results as Markdown and HTML, and writing them.

`report.json` (the contract in docs/contracts.md) is the data; everything here is a pure function
of it, written by the plugin (`write_report`, once at the end of a run; `write_json` after every
case). The matrix of several loaders (`conformance.harness.matrix`) shares the page, the style
and the colours defined here.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from loaderspec.conformance.harness.grading import OUTCOMES

__all__ = [
    "COLORS",
    "STYLE",
    "counted_under",
    "counts",
    "page",
    "properties_text",
    "report_html",
    "report_markdown",
    "shorten",
    "slowest",
    "worst_first",
    "write_json",
    "write_report",
]

COLORS = {"PASS": "#c8e6c9", "FAIL": "#ffcdd2", "NON-STRICT": "#fff9c4", "SKIP": "#e0e0e0"}
STYLE = (
    "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:3px 6px;"
    "vertical-align:top}table{border-collapse:collapse}</style>"
)


# The table takes the window's width and wraps long ids and details, so the detail (why) column
# is on screen at 1280 px.
_REPORT_STYLE = (
    "<style>table.r{width:100%;table-layout:fixed}table.r td{overflow-wrap:anywhere;"
    "font-size:13px}table.r col.case{width:28%}table.r col.props{width:16%}"
    "table.r col.level{width:5em}table.r col.outcome{width:7em}table.r col.fig{width:12%}</style>"
)
_REPORT_COLS = (
    '<colgroup><col class="case"><col class="props"><col class="level"><col class="outcome">'
    '<col class="fig"><col></colgroup>'
)
_FIRST = ("FAIL", "NON-STRICT", "SKIP", "PASS")


def worst_first(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """FAILs first, then NON-STRICT, SKIP, PASS (each by id): what needs reading, on top."""
    rank = {o: i for i, o in enumerate(_FIRST)}
    return sorted(cases, key=lambda c: (rank.get(c["outcome"], len(rank)), c.get("id", "")))


def counted_under(case: dict[str, Any]) -> list[str]:
    """The properties a case counts under in a by-property summary: those its outcome blames
    (a FAIL's failed check, a NON-STRICT's unmet SHOULDs), else the first it checks. A report
    written before outcomes named their property counts under the first it checks."""
    return list(case.get("failed_properties") or case["properties"][:1])


def properties_text(case: dict[str, Any]) -> str:
    """A case's properties cell: which failed first, then what the case checks."""
    checks = ", ".join(case["properties"])
    failed = case.get("failed_properties")
    if not failed:
        return checks
    how = "failed" if case["outcome"] == "FAIL" else "not met"
    return f"{', '.join(failed)} {how} (checks {checks})"


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


def page(title: str, body: str, style: str = STYLE) -> str:
    """A whole HTML page."""
    title = html.escape(title)
    head = f"<!doctype html><meta charset=utf-8><title>{title}</title>{style}"
    return f"{head}<h1>{title}</h1>{body}\n"


def _notes(case: dict[str, Any]) -> str:
    """What a case's outcome is beside its detail: an expectation's verdict, repeated runs."""
    parts = []
    if case.get("expectation"):
        exp = case["expected"]
        parts.append(f"{case['expectation']} (expected {exp['outcome']}: {exp['reason']})")
    runs = case.get("runs")
    if runs:
        parts.append(
            f"{runs['n']} runs: " + ", ".join(f"{k} {v}" for k, v in runs["outcomes"].items())
        )
    return "; ".join(parts)


def shorten(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: its head and its tail around an ellipsis, so that
    a long detail keeps where the actual value ends as well as what was expected (report.json
    and the HTML page keep the whole of it)."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return f"{text[: limit - tail - 3]} … {text[-tail:]}"


def _incomplete(results: dict[str, Any]) -> str:
    """What an unfinished run finished, and why it stopped (as far as report.json says)."""
    finished = results.get("finished", len(results["cases"]))
    of = f" of {results['selected']}" if results.get("selected") is not None else ""
    why = f" ({results['stopped']})" if results.get("stopped") else ""
    return f"stopped{why} after {finished}{of} cases; the cases below are those that finished"


def _verdict(results: dict[str, Any]) -> str:
    v = results.get("verdict")
    if not v:
        return ""
    state = "FAILED" if v["failed"] else "passed"
    return f"Verdict (fail on {v['policy']}): {state}" + (
        ": " + "; ".join(v["reasons"]) if v["reasons"] else ""
    )


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
            else [f"**Incomplete run**: {_incomplete(results)}.", ""]
        ),
        " · ".join(f"**{k}** {v}" for k, v in c.items()),
        "",
        f"Slowest cases: {slowest(results['cases'])}.",
        "",
        *([_verdict(results), ""] if results.get("verdict") else []),
        "| case | properties | level | outcome | figures | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case in worst_first(results["cases"]):
        detail = " ".join(filter(None, [_notes(case), case["detail"]]))
        detail = shorten(detail.replace("|", "\\|").replace("\n", " "), 600)
        lines.append(
            f"| `{case.get('id', case['case'])}` | {properties_text(case)} | "
            f"{case['level']} | {case['outcome']} | {_figures(case)} | {detail} |"
        )
    return "\n".join(lines) + "\n"


def report_html(results: dict[str, Any]) -> str:
    rows = []
    for case in worst_first(results["cases"]):
        color = COLORS.get(case["outcome"], "#fff")
        cells = [
            f"<code>{html.escape(case.get('id', case['case']))}</code>",
            html.escape(properties_text(case)),
            case["level"],
            f'<b style="background:{color}">{case["outcome"]}</b>',
            html.escape(_figures(case)),
            html.escape(" ".join(filter(None, [_notes(case), case["detail"]]))),
        ]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells) + "</tr>")
    summary = " · ".join(f"{k}: {v}" for k, v in counts(results["cases"]).items())
    head = ["case", "properties", "level", "outcome", "figures", "detail"]
    body = (
        f"<p>from {html.escape(results['loader_source'])}, run {html.escape(results['started'])}"
        f"</p><p>{summary}</p><p>Slowest cases: {html.escape(slowest(results['cases']))}</p>"
        f"<p>{html.escape(_verdict(results))}</p>"
        + (
            ""
            if results.get("complete", True)
            else f"<p><b>Incomplete run</b>: {html.escape(_incomplete(results))}.</p>"
        )
        + _table(head, rows).replace("<table>", '<table class="r">' + _REPORT_COLS, 1)
    )
    return page(f"Conformance report: {results['loader']}", body, style=STYLE + _REPORT_STYLE)


def write_json(directory: Path, results: dict[str, Any]) -> None:
    """Write `report.json` into `directory` (created); rewritten after every case of a run."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(results, indent=1) + "\n")


def write_report(directory: Path, results: dict[str, Any]) -> None:
    """Write report.json, report.md and report.html into `directory` (created)."""
    write_json(directory, results)
    (directory / "report.md").write_text(report_markdown(results))
    (directory / "report.html").write_text(report_html(results))
