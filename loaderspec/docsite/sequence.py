"""Sequence diagrams of recorded runs: one lifeline per actor, one row per trace record.

Lifelines are the spec's actors (Main, Worker k, Pin, Fault); every record is a row, drawn as
an arrow when its action sends something to another actor (``SENDS_TO``: a task, a sentinel, a
result, a signal) and as a box on its own lifeline otherwise. A lifeline ends with a cross where
its process or thread ended. Input is a ``loaderspec.traces.IteratorTrace``; output is a standalone
SVG. Knows nothing of MkDocs or of how the run was recorded.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from loaderspec.traces import IteratorTrace, Record
from loaderspec.vocabulary import Action

A = Action
# Whom each action sends to: a worker (the record's ``worker``), the main process, the pin
# thread, or the reader of the workers' results (the pin thread when there is one). None: a step
# on the actor's own lifeline.
SENDS_TO: dict[Action, str | None] = {
    A.MAIN_CALL_NEXT: None,
    A.MAIN_TRY_PUT_INDEX: "worker",
    A.MAIN_GET_DATA: None,
    A.MAIN_PROCESS_DATA: None,
    A.MAIN_SKIP_EXHAUSTED: None,
    A.MAIN_MARK_WORKER_UNAVAILABLE: None,
    A.MAIN_STOP_ITERATION: None,
    A.MAIN_DETECT_WORKER_FAILURE: None,
    A.MAIN_DETECT_PIN_FAILURE: None,
    A.MAIN_TIMEOUT: None,
    A.MAIN_RESUME_ITERATION: None,  # one step that sends a resume to every worker
    A.MAIN_DRAIN_RESUME: None,
    A.MAIN_DROP_ITERATOR: None,
    A.MAIN_SET_PIN_DONE: "pin",
    A.MAIN_JOIN_PIN_THREAD: None,
    A.MAIN_SET_WORKERS_DONE: None,  # an event every worker polls
    A.MAIN_PUT_SENTINEL: "worker",
    A.MAIN_JOIN_WORKER: None,
    A.MAIN_TERMINATE_WORKER: "worker",
    A.WORKER_FETCH: None,
    A.WORKER_PUT: "reader",
    A.WORKER_ACK_RESUME: "reader",
    A.WORKER_SKIP_INDEX: None,
    A.WORKER_EXIT: None,
    A.WORKER_WATCHDOG_EXIT: None,
    A.PIN_GET_RESULT: None,
    A.PIN_PUT_DATA: "main",
    A.PIN_EXIT: None,
    A.FAULT_KILL_WORKER: "worker",
    A.FAULT_KILL_PARENT: "main",
    A.FAULT_HANG_WORKER: "worker",
    A.FAULT_FETCH_ERROR: "worker",
    A.FAULT_PUT_ERROR: "worker",  # the batch that worker cannot send
    A.FAULT_RECV_ERROR: "main",  # the read that fails in the main process
    A.FAULT_PIN_DEATH: "pin",  # the read that kills the pin thread
}
# Actions after which a lifeline ends: the actor's own exit (the line stops at its box), or a
# kill that reaches it (the line stops with a cross).
ENDS_OWN = frozenset({A.WORKER_EXIT, A.WORKER_WATCHDOG_EXIT, A.PIN_EXIT})
ENDS_TARGET = frozenset(
    {A.FAULT_KILL_WORKER, A.FAULT_KILL_PARENT, A.MAIN_TERMINATE_WORKER, A.FAULT_PIN_DEATH}
)
COLORS = {"Main": "#3949ab", "Worker": "#00796b", "Pin": "#8e24aa", "Fault": "#c62828"}

FONT = "DejaVu Sans Mono, Menlo, Consolas, monospace"
CHAR_W = 7.3  # px per character of FONT at FONT_PX
FONT_PX = 12
ROW_H = 22
HEAD_H = 26
GUTTER = 62  # the time column
MIN_LANE_W = 160

assert set(SENDS_TO) == set(Action), "every action needs a SENDS_TO entry"


@dataclass(frozen=True)
class DrawnRecord:
    """One record as drawn: from which lifeline to which (equal for a step), and its label."""

    record: Record
    source: str
    target: str
    text: str


def lane_of(record: Record) -> str:
    """The lifeline of the actor that logged ``record``."""
    if record.actor == "Worker":
        return f"Worker {'?' if record.worker is None else record.worker}"
    return record.actor


def _target(record: Record, pinned: bool) -> str:
    to = SENDS_TO.get(Action(record.action))
    if to == "worker":
        return f"Worker {'?' if record.worker is None else record.worker}"
    if to == "reader":
        return "Pin" if pinned else "Main"
    if to == "pin":
        return "Pin"
    if to == "main":
        return "Main"
    return lane_of(record)


def label(record: Record, *, arrow: bool) -> str:
    """``Action #task (w1) kind``: the task, the worker unless the arrow or lane shows it, and
    a result kind other than data."""
    text = record.action
    if record.task is not None:
        text += f" #{record.task}"
    if record.worker is not None and record.actor != "Worker" and not arrow:
        text += f" (w{record.worker})"
    if record.kind not in (None, "data"):
        text += f" {record.kind}"
    return text


def rows_of(run: IteratorTrace) -> list[DrawnRecord]:
    """The drawable rows of a run (its ``Config`` header is not an action and is left out)."""
    pinned = bool(run.config.get("pin_memory")) or any(r.actor == "Pin" for r in run.records)
    rows = []
    for record in run.records:
        source = lane_of(record)
        target = _target(record, pinned)
        rows.append(DrawnRecord(record, source, target, label(record, arrow=source != target)))
    return rows


def lanes_of(run: IteratorTrace, rows: list[DrawnRecord]) -> list[str]:
    """Main, the workers, then Pin and Fault where the run has them."""
    seen = {r.source for r in rows} | {r.target for r in rows}
    workers = int(run.config.get("num_workers") or 0)
    lanes = ["Main"] + [f"Worker {w}" for w in range(workers)]
    lanes += sorted(x for x in seen if x.startswith("Worker ") and x not in lanes)
    lanes += [x for x in ("Pin", "Fault") if x in seen]
    return lanes


def _text_w(text: str) -> float:
    return len(text) * CHAR_W + 10


def render(run: IteratorTrace, title: str) -> str:
    """The run as an SVG sequence diagram."""
    rows = rows_of(run)
    lanes = lanes_of(run, rows)
    index = {lane: i for i, lane in enumerate(lanes)}
    # Lane spacing: the widest label of an arrow between neighbours must fit between them.
    spacing = float(MIN_LANE_W)
    for row in rows:
        apart = abs(index[row.source] - index[row.target])
        if apart:
            spacing = max(spacing, _text_w(row.text) / apart + 16)
    half = {lane: _text_w(lane) / 2 for lane in lanes}
    for row in rows:
        if row.source == row.target:
            half[row.source] = max(half[row.source], _text_w(row.text) / 2)
    x0 = GUTTER + half[lanes[0]] + 6
    xs = {lane: x0 + i * spacing for i, lane in enumerate(lanes)}
    width = xs[lanes[-1]] + half[lanes[-1]] + 6
    top = 8 + HEAD_H + 14
    height = top + len(rows) * ROW_H + 12

    ends: dict[str, float] = {}  # lane -> the y where its line stops
    killed: set[str] = set()
    for i, row in enumerate(rows):
        y = top + i * ROW_H + ROW_H / 2
        action = Action(row.record.action)
        if action in ENDS_OWN and row.source not in ends:
            ends[row.source] = y
        if action in ENDS_TARGET and row.target not in ends:
            ends[row.target] = y + 3
            killed.add(row.target)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}"'
        f' viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" font-size="{FONT_PX}">',
        f"<title>{html.escape(title)}</title>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"'
        ' fill="#444"/></marker></defs>',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#fff"/>',
        f'<text x="4" y="{8 + HEAD_H / 2 + 4:.0f}" fill="#777">ms</text>',
    ]
    for lane in lanes:
        x, color = xs[lane], COLORS.get(lane.split()[0], "#444")
        end = ends.get(lane, height - 6)
        out.append(
            f'<line x1="{x:.1f}" y1="{8 + HEAD_H}" x2="{x:.1f}" y2="{end:.1f}" stroke="{color}"'
            ' stroke-dasharray="4 3" stroke-opacity="0.6"/>'
        )
        w = _text_w(lane)
        out.append(
            f'<rect x="{x - w / 2:.1f}" y="8" width="{w:.1f}" height="{HEAD_H}" rx="4"'
            f' fill="{color}"/><text x="{x:.1f}" y="{8 + HEAD_H / 2 + 4:.1f}" fill="#fff"'
            f' text-anchor="middle" font-weight="bold">{html.escape(lane)}</text>'
        )
        if lane in killed:
            y = ends[lane]
            out.append(
                f'<path d="M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} M{x + 5:.1f},'
                f'{y - 5:.1f} L{x - 5:.1f},{y + 5:.1f}" stroke="{color}" stroke-width="2"/>'
            )
    t0 = rows[0].record.t if rows else 0
    epoch = rows[0].record.epoch if rows else None
    for i, row in enumerate(rows):
        y = top + i * ROW_H + ROW_H / 2
        rec = row.record
        if rec.epoch is not None and epoch is not None and rec.epoch != epoch:
            epoch = rec.epoch
            out.append(
                f'<line x1="{GUTTER}" y1="{y - ROW_H / 2:.1f}" x2="{width - 4:.0f}"'
                f' y2="{y - ROW_H / 2:.1f}" stroke="#999" stroke-dasharray="2 2"/>'
                f'<text x="{width - 6:.0f}" y="{y - ROW_H / 2 - 3:.1f}" fill="#777"'
                f' text-anchor="end">epoch {epoch}</text>'
            )
        out.append(f'<text x="4" y="{y + 4:.1f}" fill="#777">{(rec.t - t0) / 1e6:.1f}</text>')
        color = COLORS.get(rec.actor, "#444")
        text = html.escape(row.text)
        if row.source == row.target:
            x, w = xs[row.source], _text_w(row.text)
            out.append(
                f'<rect x="{x - w / 2:.1f}" y="{y - 9:.1f}" width="{w:.1f}" height="18" rx="3"'
                f' fill="#fff" stroke="{color}"/><text x="{x:.1f}" y="{y + 4:.1f}"'
                f' text-anchor="middle" fill="#222">{text}</text>'
            )
        else:
            x1, x2 = xs[row.source], xs[row.target]
            out.append(
                f'<line x1="{x1:.1f}" y1="{y + 3:.1f}" x2="{x2:.1f}" y2="{y + 3:.1f}"'
                f' stroke="{color}" stroke-width="1.4" marker-end="url(#head)"/>'
                f'<text x="{(x1 + x2) / 2:.1f}" y="{y:.1f}" text-anchor="middle"'
                f' fill="{color}" stroke="#fff" stroke-width="3" paint-order="stroke">'
                f"{text}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
