"""The conformance matrix: several loaders' reports side by side, as JSON, Markdown and HTML.

A pure function of each loader's ``report.json`` (``matrix``), rendered by ``matrix_markdown``
and ``matrix_html`` and written by ``write_matrix`` (``loaderspec report`` and the documentation
site use it). Loaders are sorted by their MUST failures, fewest first; a summary row per spec
property gives each loader's outcomes over the cases that check it; each case row shows only
outcomes, each non-PASS with a note number, and the notes below give every non-PASS in one line:
its cause (the report's detail) and, for a FAIL or NON-STRICT, the public issues the case guards
against (``FAILURE-MODES.md`` ids from the case's docstring). Cells stay short and the HTML table
takes the page's width (names wrap at underscores), so it reads without scrolling sideways.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from loaderspec.conformance.catalog import issue_segments
from loaderspec.conformance.harness.grading import FAIL, NON_STRICT, PASS
from loaderspec.conformance.harness.report import COLORS, STYLE, counted_under, counts, page
from loaderspec.conformance.ids import CASES_DIR, canonical

from loaderspec.vocabulary import ALL_PROPERTIES

__all__ = [
    "TOTALS_BEGIN",
    "TOTALS_END",
    "case_key",
    "matrix",
    "matrix_html",
    "matrix_markdown",
    "short_name",
    "titles",
    "totals_table",
    "with_totals",
    "write_matrix",
]

# The page (README.md) whose totals table `loaderspec report --readme` rewrites between these.
TOTALS_BEGIN, TOTALS_END = "<!-- matrix:begin -->", "<!-- matrix:end -->"

CAUSE_CHARS = 160
_ABBREV = {PASS: "PASS", FAIL: "FAIL", NON_STRICT: "N-S", "SKIP": "SKIP"}
_MATRIX_STYLE = (
    "<style>table.m{width:100%;table-layout:fixed}table.m td,table.m th{overflow-wrap:anywhere;"
    "font-size:13px}table.m col.case{width:30%}table.m col.level{width:5.5em}"
    "ol.notes li{margin:2px 0}</style>"
)


def short_name(loader: str) -> str:
    """A loader's column title: ``reference``, ``torch``, or an adapter's module name (with its
    class where the module has several loaders: ``torchdata_nodes.ThreadLoader``)."""
    module, _, cls = loader.partition(":")
    # loaderspec.reference, loaderspec.conformance.adapters...; reports before 0.3 lack the prefix
    parts = module.removeprefix("loaderspec.").split(".")
    if parts[:2] == ["conformance", "adapters"] and len(parts) > 2:
        name = parts[-1]
        return name if cls in ("", "Loader") else f"{name}.{cls}"
    return parts[0]


def titles(loaders: list[str]) -> dict[str, str]:
    """Each loader's column title: its `short_name`, unless another loader shares it (two loaders
    of one top-level package): then its whole module, with the class where that is not enough."""
    first = {x: short_name(x) for x in loaders}
    out = {}
    for x in loaders:
        if sum(t == first[x] for t in first.values()) == 1:
            out[x] = first[x]
            continue
        module, _, cls = x.partition(":")
        same_module = sum(y.partition(":")[0] == module for y in loaders) > 1
        out[x] = (
            f"{module}.{cls}" if same_module or cls not in ("", "Loader", "DataLoader") else module
        )
    return out


def _reported_key(case: dict[str, Any]) -> str:
    """The id a report gives a case (``conformance.ids``); for a report written before ids
    existed, its node id without the folders."""
    if case.get("id"):
        return str(case["id"])
    file, _, rest = str(case["nodeid"]).partition("::")
    return f"{Path(file).stem}::{rest}"


def case_key(case: dict[str, Any]) -> str:
    """A case's current id: a case moved or renamed since the report was written is keyed (and
    linked) where it is now (``ids.canonical``)."""
    key = _reported_key(case)
    return canonical(key) or key


def _case_file(case: dict[str, Any], key: str) -> str:
    """The case's file: as reported, or where a case moved since then now lives."""
    if key != _reported_key(case):
        return f"{CASES_DIR}/{key.split('::', 1)[0]}.py"
    return str(case.get("file") or str(case.get("nodeid", "")).split("::")[0])


def _must_failures(res: dict[str, Any] | None) -> int:
    cases = (res or {}).get("cases", [])
    return sum(1 for c in cases if c["outcome"] == FAIL and c["level"] == "MUST")


# Where a run was installed, in a traceback's file names: the matrix is published, and the
# machine's folders say nothing about the loader ("/tmp/x/.venv/lib/python3.11/site-packages/torch/
# ..." -> "torch/...", "/home/me/loaderspec/conformance/..." -> "conformance/...").
_INSTALL_PREFIX = re.compile(
    r"(?:/[\w.+-]+)+/(?:(?:site|dist)-packages/|(?=(?:conformance|faultinject|reference|loaderspec)/))"
)


def _cause(case: dict[str, Any]) -> str:
    text = " ".join(str(case.get("detail") or "").split()) or "no detail recorded"
    text = _INSTALL_PREFIX.sub("", text)
    if len(text) > CAUSE_CHARS:
        text = text[: CAUSE_CHARS - 1] + "…"
    runs = case.get("runs")
    if runs and len(runs.get("outcomes", {})) > 1:
        text += f" (racy: {runs['failed']} of {runs['n']} runs FAIL)"
    return text


def matrix(results: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """The matrix of each loader's report.json (None: the loader produced none)::

    {loaders (fewest MUST failures first), incomplete, must_failures, properties: [{property,
    level, by_loader: {loader: counts}}], cases: [{id, file, case, properties, level,
    by_loader: {loader: case | None}, notes: {loader: n}}], notes: [{n, loader, id,
    outcome, cause, issues}]}
    """
    given = list(results)
    loaders = sorted(given, key=lambda x: (_must_failures(results[x]), given.index(x)))
    rows: dict[str, dict[str, Any]] = {}
    for loader in loaders:
        for case in (results[loader] or {}).get("cases", []):
            key = case_key(case)
            row = rows.setdefault(
                key,
                {
                    "id": key,
                    "file": _case_file(case, key),
                    "case": key.split("::", 1)[1],
                    "properties": case["properties"],
                    "level": case["level"],
                    "by_loader": {},
                    "notes": {},
                },
            )
            row["by_loader"][loader] = case
    cases = sorted(rows.values(), key=lambda r: r["id"])
    notes: list[Any] = []
    for row in cases:
        for loader in loaders:
            row["by_loader"].setdefault(loader, None)
            case = row["by_loader"][loader]
            if case is None or case["outcome"] == PASS:
                continue
            issues = case.get("guards", "") if case["outcome"] in (FAIL, NON_STRICT) else ""
            notes.append(
                {
                    "n": len(notes) + 1,
                    "loader": loader,
                    "id": row["id"],
                    "outcome": case["outcome"],
                    "cause": _cause(case),
                    "issues": issues,
                }
            )
            row["notes"][loader] = len(notes)
    properties = []
    for prop in ALL_PROPERTIES:
        # Each loader's cases count under the property their outcome blames (a FAIL under the
        # property whose check failed), not under the case's first marker.
        mine = {
            x: [
                c
                for r in cases
                if (c := r["by_loader"][x]) is not None and prop.name in counted_under(c)
            ]
            for x in loaders
        }
        if any(mine.values()):
            by_loader = {x: counts(mine[x]) for x in loaders}
            properties.append(
                {"property": prop.name, "level": prop.level.value, "by_loader": by_loader}
            )
    # A run stopped from outside (past its time limit) keeps the cases it finished; "-" marks
    # the rest.
    incomplete = [
        x for x in loaders if results[x] is None or not (results[x] or {}).get("complete", True)
    ]
    return {
        "loaders": loaders,
        "titles": titles(loaders),
        "incomplete": incomplete,
        "must_failures": {x: _must_failures(results[x]) for x in loaders},
        "properties": properties,
        "cases": cases,
        "notes": notes,
    }


def _summary(c: dict[str, int]) -> str:
    """A property's or loader's outcomes in one short cell: "7 PASS", "5 PASS 2 FAIL"."""
    parts = [f"{n} {_ABBREV[o]}" for o, n in c.items() if n]
    return " ".join(parts) or "-"


def _worst_color(c: dict[str, int]) -> str:
    """The colour of the worst outcome a summary cell counts."""
    for outcome in (FAIL, NON_STRICT, "SKIP", PASS):
        if c.get(outcome):
            return COLORS[outcome]
    return "#fff"


def _outcome_cell(row: dict[str, Any], loader: str) -> str:
    case = row["by_loader"][loader]
    if case is None:
        return "-"
    note = row["notes"].get(loader)
    return _ABBREV[case["outcome"]] + (f" [{note}]" if note else "")


def _totals(m: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {
        x: counts([c for r in m["cases"] if (c := r["by_loader"][x]) is not None])
        for x in m["loaders"]
    }


def _title(m: dict[str, Any], loader: str) -> str:
    return str(m.get("titles", {}).get(loader) or short_name(loader))


def _legend(m: dict[str, Any]) -> list[str]:
    return [f"{_title(m, x)}: {x}" for x in m["loaders"]]


def matrix_markdown(m: dict[str, Any]) -> str:
    loaders = m["loaders"]
    head = " | ".join(f"`{_title(m, x)}`" for x in loaders)
    rule = " | ".join("---" for _ in loaders)
    lines = [
        "# Conformance matrix",
        "",
        "Loaders, fewest MUST failures first: "
        + "; ".join(f"`{_title(m, x)}` = `{x}`" for x in loaders)
        + ". N-S: NON-STRICT; `[n]`: note n below, the cause of that outcome.",
        "",
    ]
    if m.get("incomplete"):
        lines += [
            "Incomplete runs (stopped at the time limit, or did not start: see their"
            " pytest-output.txt; `-`: not run): " + ", ".join(f"`{x}`" for x in m["incomplete"]),
            "",
        ]
    lines += ["## By property", "", f"| property | level | {head} |", f"| --- | --- | {rule} |"]
    for p in m["properties"]:
        cells = " | ".join(_summary(p["by_loader"][x]) for x in loaders)
        lines.append(f"| {p['property']} | {p['level']} | {cells} |")
    totals = _totals(m)
    lines.append(
        "| **MUST failures** | | " + " | ".join(str(m["must_failures"][x]) for x in loaders) + " |"
    )
    lines.append("| **all cases** | | " + " | ".join(_summary(totals[x]) for x in loaders) + " |")
    lines += ["", "## By case", "", f"| case | level | {head} |", f"| --- | --- | {rule} |"]
    for row in m["cases"]:
        cells = " | ".join(_outcome_cell(row, x) for x in loaders)
        lines.append(f"| `{row['id']}` | {row['level']} | {cells} |")
    lines += ["", "## Notes: every outcome other than PASS", ""]
    if not m["notes"]:
        lines.append(
            "None among the cases that ran (incomplete runs above)."
            if m.get("incomplete")
            else "None: every case passed for every loader."
        )
    for note in m["notes"]:
        issues = f" Guards against: {_issues_markdown(note['issues'])}" if note["issues"] else ""
        cause = note["cause"].replace("|", "\\|")
        cause += "" if cause.endswith((".", "…", ")")) else "."
        lines.append(
            f"{note['n']}. `{_title(m, note['loader'])}` `{note['id']}`: {note['outcome']}: "
            f"{cause}{issues}"
        )
    return "\n".join(lines) + "\n"


def _issues_markdown(line: str) -> str:
    return "".join(f"[{t}]({url})" if url else t for t, url in issue_segments(line))


def _issues_html(line: str) -> str:
    return "".join(
        f'<a href="{url}">{html.escape(t)}</a>' if url else html.escape(t)
        for t, url in issue_segments(line)
    )


def _breakable(text: str) -> str:
    return html.escape(text).replace("_", "_<wbr>").replace(",", ",<wbr>")


def matrix_html(m: dict[str, Any]) -> str:
    loaders = m["loaders"]
    cols = '<colgroup><col class="case"><col class="level">' + "<col>" * len(loaders)
    head = "<tr><th>{}</th><th>level</th>{}</tr>".format(
        "{}", "".join(f"<th>{html.escape(_title(m, x))}</th>" for x in loaders)
    )

    def table(first: str, rows: list[str]) -> str:
        return f'<table class="m">{cols}</colgroup>{head.format(first)}{"".join(rows)}</table>'

    prop_rows = []
    for p in m["properties"]:
        summary = "".join(
            f'<td style="background:{_worst_color(p["by_loader"][x])}">'
            f"{_summary(p['by_loader'][x])}</td>"
            for x in loaders
        )
        prop_rows.append(f"<tr><td>{p['property']}</td><td>{p['level']}</td>{summary}</tr>")
    totals = _totals(m)
    prop_rows.append(
        "<tr><th>MUST failures</th><td></td>"
        + "".join(f"<td><b>{m['must_failures'][x]}</b></td>" for x in loaders)
        + "</tr><tr><th>all cases</th><td></td>"
        + "".join(f"<td>{_summary(totals[x])}</td>" for x in loaders)
        + "</tr>"
    )
    case_rows = []
    for row in m["cases"]:
        cells = []
        for x in loaders:
            case = row["by_loader"][x]
            color = COLORS.get(case["outcome"], "#fff") if case else "#fff"
            text = html.escape(_outcome_cell(row, x))
            note = row["notes"].get(x)
            if note:
                text = f'<a href="#n{note}">{text}</a>'
            cells.append(f'<td style="background:{color}">{text}</td>')
        case_rows.append(
            f"<tr><td><code>{_breakable(row['id'])}</code></td><td>{row['level']}</td>"
            + "".join(cells)
            + "</tr>"
        )
    notes = "".join(
        f'<li id="n{n["n"]}"><b>{html.escape(_title(m, n["loader"]))}</b> '
        f"<code>{_breakable(n['id'])}</code>: {n['outcome']}: {html.escape(n['cause'])}"
        + (f" <i>Guards against: {_issues_html(n['issues'])}</i>" if n["issues"] else "")
        + "</li>"
        for n in m["notes"]
    )
    incomplete = (
        "<p>Incomplete runs (stopped at the time limit, or did not start): "
        + ", ".join(f"<code>{html.escape(x)}</code>" for x in m["incomplete"])
        + "</p>"
        if m.get("incomplete")
        else ""
    )
    legend = "<p>Loaders, fewest MUST failures first: " + "; ".join(
        html.escape(x) for x in _legend(m)
    )
    body = (
        f"{legend}. N-S: NON-STRICT; [n]: note n, the cause.</p>{incomplete}"
        f"<h2>By property</h2>{table('property', prop_rows)}"
        f"<h2>By case</h2>{table('case', case_rows)}"
        f'<h2>Notes: every outcome other than PASS</h2><ol class="notes">{notes}</ol>'
    )
    return page("Conformance matrix", body, style=STYLE + _MATRIX_STYLE)


def _package(loader: str) -> str:
    """The package a loader column grades, as its report's ``versions`` names it: ``loaderspec``
    for the reference, the adapted package for an adapter (``torchdata_nodes`` -> torchdata)."""
    module = loader.partition(":")[0]
    parts = module.removeprefix("loaderspec.").split(".")
    if parts[:2] == ["conformance", "adapters"] and len(parts) > 2:
        return parts[2].split("_")[0]
    return "loaderspec" if parts[0] == "reference" else parts[0]


def totals_table(m: dict[str, Any], results: dict[str, dict[str, Any] | None]) -> str:
    """Each loader's totals in one Markdown row (fewest MUST failures first): its column title,
    the graded package's version, the counts, and the day its run started with its case count;
    "incomplete" for a run that left no complete report."""
    totals = _totals(m)
    lines = [
        "| loader | PASS | FAIL | NON-STRICT | SKIP | run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for x in m["loaders"]:
        res = results.get(x) or {}
        package = _package(x)
        version = res.get("versions", {}).get(package)
        label = f"`{_title(m, x)}`" + (f" ({package} {version})" if version else "")
        counts = " | ".join(str(totals[x].get(o, 0)) for o in (PASS, FAIL, NON_STRICT, "SKIP"))
        cases = sum(totals[x].values())
        run = f"{str(res.get('started', ''))[:10]}, {cases} cases"
        if x in m.get("incomplete", []):
            run += ", incomplete"
        lines.append(f"| {label} | {counts} | {run} |")
    return "\n".join(lines) + "\n"


def with_totals(page: str, table: str) -> str:
    """``page`` with the totals table between `TOTALS_BEGIN` and `TOTALS_END` replaced.

    Raises:
        ValueError: the page lacks either marker (it is left as it was).
    """
    head, begin, rest = page.partition(TOTALS_BEGIN)
    _, end, tail = rest.partition(TOTALS_END)
    if not begin or not end:
        raise ValueError(
            f"no {TOTALS_BEGIN} ... {TOTALS_END} markers: put them where the totals go"
        )
    return f"{head}{TOTALS_BEGIN}\n{table}{TOTALS_END}{tail}"


def write_matrix(out: Path, results: dict[str, dict[str, Any] | None]) -> str:
    """Write matrix.json, matrix.md and matrix.html into `out`; return the Markdown."""
    m = matrix(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(m, indent=1) + "\n")
    md = matrix_markdown(m)
    (out / "matrix.md").write_text(md)
    (out / "matrix.html").write_text(matrix_html(m))
    return md
