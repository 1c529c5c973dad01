"""The results folder of one bench run: `results.json`, `results.md` and PNG plots.

Owns the written forms of a run: every row and the run's metadata as JSON; a Markdown page with
the targets, a table per section (loaders side by side) and the plots; the plots themselves
(matplotlib, the optional `bench` extra: without it the page says so and nothing else is lost).
Knows nothing of how a figure was measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.rows import Row, to_json
from bench.throughput import AXES, Workload

__all__ = ["write"]


def write(
    out: Path,
    rows: list[Row],
    meta: dict[str, Any],
    works: Sequence[Workload] = (),
    summary: dict[str, Any] | None = None,
    spec_points: Sequence[dict[str, Any]] = (),
) -> list[Path]:
    """Write the run into ``out`` (created); return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    loaders = list(meta["loaders"])
    written = [out / "results.json"]
    doc = json.loads(to_json(rows, meta))
    doc["throughput"] = summary or {}
    doc["spec_points"] = list(spec_points)
    written[0].write_text(json.dumps(doc, indent=2) + "\n")
    plots, why_not = _plots(out, rows, loaders, works, summary or {}, spec_points)
    page = _page(rows, meta, loaders, works, summary or {}, plots, why_not)
    (out / "results.md").write_text(page)
    return [*written, out / "results.md", *plots]


# ---------------------------------------------------------------------------- the page ---------


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def _table(head: list[str], body: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return [*lines, ""]


def _sizes(meta: dict[str, Any]) -> str:
    """How many repeats and how long a rate's window, where the run recorded them."""
    parts = []
    if meta.get("repeats"):
        parts.append(f"{meta['repeats']} repeat{'s' * (meta['repeats'] != 1)} per loader")
    if meta.get("window_s"):
        parts.append(f"each rate over {meta['window_s']:g} s")
    return f" ({', '.join(parts)})" if parts else ""


def _page(
    rows: list[Row],
    meta: dict[str, Any],
    loaders: list[str],
    works: Sequence[Workload],
    summary: dict[str, Any],
    plots: list[Path],
    why_not: str,
) -> str:
    load = meta.get("loadavg_at_start")
    end = meta.get("loadavg_at_end")
    lines = [
        f"# Bench results ({meta['mode']})",
        "",
        f"{meta['date']}; {meta['platform']}; {meta['cpus']} CPUs; Python {meta['python']}, "
        f"torch {meta['torch']}; load average at the start {_loads(load)}, at the end "
        f"{_loads(end)}. Ratios are taken between figures of this run{_sizes(meta)}.",
        "",
    ]
    lines += _table(
        ["loader", "available"],
        ([name, "yes" if why == "available" else why] for name, why in meta["loaders"].items()),
    )
    targets = [r for r in rows if "target" in r.note and ("reference" in r.name)]
    if targets:
        lines += ["## Targets (reference)", ""]
        lines += _table(
            ["figure", "value", "note"],
            ([r.name, _fmt(r.value, r.unit), r.note] for r in targets),
        )
    if summary:
        lines += ["## Throughput (batches/s, median; ratio to torch)", ""]
        lines += _table(
            ["workload", *loaders],
            ([w.label, *(_rate_cell(summary[w.name], name) for name in loaders)] for w in works),
        )
        ratios = [
            r
            for r in rows
            if r.section == "throughput" and r.name.startswith(("ratio ", "noise floor"))
        ]
        lines += ["## Ratios, paired repeat by repeat (median, range, verdict)", ""]
        lines += _table(
            ["figure", "median", "range and verdict"],
            ([r.name, _fmt(r.value, r.unit), r.note] for r in ratios),
        )
        lines += ["## CPU per batch (us: main process + workers)", ""]
        lines += _table(
            ["workload", *loaders],
            ([w.label, *(_cpu_cell(summary[w.name].get(name)) for name in loaders)] for w in works),
        )
        lines += ["## Peak resources during the epoch (RSS MB / fds / threads / processes)", ""]
        lines += _table(
            ["workload", *loaders],
            ([w.label, *(_res_cell(summary[w.name].get(name)) for name in loaders)] for w in works),
        )
    for section, title in (
        ("faults", "Faults"),
        ("spec", "Spec (TLC)"),
        ("resume", "Resume (checkpoint and resume)"),
        ("suite", "Suite"),
    ):
        part = [r for r in rows if r.section == section]
        if part:
            lines += [f"## {title}", ""]
            lines += _table(
                ["figure", "value", "note"], ([r.name, _fmt(r.value, r.unit), r.note] for r in part)
            )
    lines += _stages_table([r for r in rows if r.section == "stages"])
    transport = [r for r in rows if r.section == "transport"]
    if transport:
        lines += ["## Transport (us per batch across a pipe)", ""]
        lines += _table(
            ["figure", "value", "note"],
            ([r.name, _fmt(r.value, r.unit), r.note] for r in transport),
        )
    lines += ["## Plots", ""]
    if plots:
        lines += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    else:
        lines += [f"No plots: {why_not}", ""]
    return "\n".join(lines)


def _stages_table(part: list[Row]) -> list[str]:
    """The stages section as one table: a stage per line, a loader per column (us of CPU per
    cheap batch; "m" the loader's process, "w" its workers; blank where a loader has none)."""
    if not part:
        return []
    cells: dict[str, dict[str, str]] = {}
    loaders: list[str] = []
    for row in part:
        label, _, figure = row.name.partition(": ")
        loader = label.removeprefix("stages ")
        if loader not in loaders:
            loaders.append(loader)
        where = row.note.split(";")[0] if row.note.startswith(("main;", "worker;")) else ""
        text = _fmt(row.value) + (f" ({where[0]})" if where and row.value is not None else "")
        cells.setdefault(figure, {})[loader] = "" if row.value is None else text
    head = ["us of CPU per cheap batch (m: main process, w: workers)", *loaders]
    body = ([figure, *(by.get(name, "") for name in loaders)] for figure, by in cells.items())
    title = "## Where a cheap batch's CPU goes (stages in isolation; measured)"
    return [title, "", *_table(head, body)]


def _loads(load: Any) -> str:
    return "n/a" if not load else " / ".join(f"{x:.1f}" for x in load)


def _rate_cell(per: dict[str, Any], name: str) -> str:
    fig = per.get(name)
    if not isinstance(fig, dict):
        return "n/a" if fig is None else str(fig)[:60]
    cell = _fmt(fig["median"])
    torch_fig = per.get("torch")
    if name != "torch" and isinstance(torch_fig, dict) and torch_fig["median"]:
        cell += f" ({fig['median'] / torch_fig['median']:.2f}x)"
    return cell


def _cpu_cell(fig: Any) -> str:
    if not isinstance(fig, dict):
        return "n/a"
    main, workers = fig["main_cpu_us"], fig["workers_cpu_us"]
    return " + ".join("n/a" if v is None else f"{v:,.0f}" for v in (main, workers))


def _res_cell(fig: Any) -> str:
    if not isinstance(fig, dict):
        return "n/a"
    return (
        f"{fig['peak_rss_mb']:,.0f} / {fig['peak_fds']} / {fig['peak_threads']} / "
        f"{fig['peak_processes']}"
    )


# ---------------------------------------------------------------------------- the plots --------


def _plots(
    out: Path,
    rows: list[Row],
    loaders: list[str],
    works: Sequence[Workload],
    summary: dict[str, Any],
    spec_points: Sequence[dict[str, Any]],
) -> tuple[list[Path], str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed (pip install 'loaderspec[bench]')"
    made: list[Path] = []
    for axis, title in AXES.items():
        points = sorted((w for w in works if axis in w.axes), key=lambda w: w.value(axis))
        if len(points) < 2 or not summary:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for name in loaders:
            xs, ys, below, above = [], [], [], []
            for w in points:
                cell = summary[w.name].get(name)
                if isinstance(cell, dict):
                    xs.append(w.value(axis))
                    ys.append(cell["median"])
                    below.append(cell["median"] - cell.get("low", cell["min"]))
                    above.append(cell.get("high", cell["max"]) - cell["median"])
            if ys:
                # The bars are the median's interval (the repeats' range up to 8 of them, then
                # narrower: bench.throughput.Interval).
                ax.errorbar(
                    range(len(xs)) if axis == "cost" else xs,
                    ys,
                    yerr=[below, above],
                    marker="o",
                    capsize=3,
                    label=name,
                )
        if axis == "cost":
            ax.set_xticks(range(len(points)), [f"{w.value(axis):g}" for w in points])
        elif axis == "size":
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.set_ylabel("batches/s (median, bars: its interval over the repeats)")
        ax.set_title(f"throughput vs {title}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        made.append(_save(fig, plt, out / f"throughput_{axis}.png"))
    faults = [r for r in rows if r.section == "faults" and not r.name.startswith("ratio")]
    if faults:
        made.append(_fault_plot(plt, out / "faults.png", faults, loaders))
    if spec_points:
        made.append(_spec_plot(plt, out / "spec.png", spec_points))
    return made, ""


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fault_plot(plt: Any, path: Path, faults: list[Row], loaders: list[str]) -> Path:
    """Seconds per fault figure, one bar per loader; a bound reached is drawn at the bound."""
    labels = []
    for r in faults:
        label = r.name.rsplit(" (", 1)[0]
        if label not in labels and r.unit in ("s", "ms"):
            labels.append(label)
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    width = 0.8 / max(1, len(loaders))
    for i, name in enumerate(loaders):
        heights = []
        for label in labels:
            row = next((r for r in faults if r.name == f"{label} ({name})"), None)
            value = None if row is None else (row.value if row.value is not None else row.bound)
            if value is not None and row is not None and row.unit == "ms":
                value /= 1000
            heights.append(value if value else math.nan)
        ax.bar([x + i * width for x in range(len(labels))], heights, width, label=name)
    ticks = [x + 0.4 - width / 2 for x in range(len(labels))]
    ax.set_xticks(ticks, labels, rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title("fault latencies (a bound reached is drawn at the bound; lower is better)")
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def _spec_plot(plt: Any, path: Path, points: Sequence[dict[str, Any]]) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for constant in dict.fromkeys(p["constant"] for p in points):
        mine = [p for p in points if p["constant"] == constant and p.get("states")]
        ax.plot([p["value"] for p in mine], [p["states"] for p in mine], marker="o", label=constant)
    ax.set_yscale("log")
    ax.set_xlabel("constant's value (the others as in MCQuickMap)")
    ax.set_ylabel("distinct states")
    ax.set_title("TLC state space")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, plt, path)
