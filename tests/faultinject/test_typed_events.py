"""No case, check or bench figure reads an event by a string key: every stream the harness reads
(a plan's run, a rank group's, a resume scenario's) is one family of frozen typed classes, one
class per event name, so a misspelt event class is an import error, not an empty list (a vacuous
PASS)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from loaderspec.faultinject import events

ROOT = Path(__file__).resolve().parents[2]
STREAMS = (events,)
# What a module that reads events imports: a stream, the harness side that plays it, or the suite's
# harness.
_PLAYERS = re.compile(r"(faultinject\.(events|driver|ranks|resume)|conformance\.harness)\b")

# The renderers of the suite's JSON reports: they read a report's dicts, not events.
_RENDERERS = {"report.py", "matrix.py"}


def readers() -> list[Path]:
    """The cases, harness checks and bench figures that read events, and faultinject's own
    harness sides. (The JSON reports and results some of them read are not events; nor are the
    TLC states ``loaderspec.scenarios`` reads, which are the spec's records.)"""
    places = [ROOT / "conformance" / "cases", ROOT / "conformance" / "harness", ROOT / "bench"]
    found = [p for place in places for p in sorted(place.rglob("*.py"))]
    found = [p for p in found if p.name not in _RENDERERS and _PLAYERS.search(p.read_text())]
    return found + [ROOT / "faultinject" / f"{m}.py" for m in ("driver", "ranks", "resume")]


def _event_fields() -> set[str]:
    """Every field of every event class, and ``kind`` (what the untyped events were keyed by)."""
    names = {"kind"}
    for module in STREAMS:
        for name in module.__all__:
            cls = getattr(module, name)
            if dataclasses.is_dataclass(cls):
                names |= {f.name for f in dataclasses.fields(cls)}
    return names


def string_key_reads(source: str, fields: set[str]) -> list[str]:
    """Where ``source`` reads an event by a string: ``x["value"]`` for an event field, or a kind
    named by a string in an ``of(...)`` call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = node.slice if isinstance(node, ast.Subscript) else None
        if isinstance(key, ast.Constant) and key.value in fields:
            found.append(f"line {node.lineno}: [{key.value!r}]")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "of":
            strings = [a.value for a in node.args if isinstance(a, ast.Constant)]
            found += [f"line {node.lineno}: of(..., {s!r})" for s in strings if isinstance(s, str)]
    return found


def test_no_reader_reads_an_event_by_a_string_key():
    fields = _event_fields()
    found = {
        str(path.relative_to(ROOT)): reads
        for path in readers()
        if (reads := string_key_reads(path.read_text(), fields))
    }
    assert not found, found


def test_a_string_key_read_is_found():
    source = 'r.of(0, None, "batch")\nlast = events[-1]["value"]\nkw["sampler"] = 1\n'
    assert string_key_reads(source, _event_fields()) == [
        "line 1: of(..., 'batch')",
        "line 2: ['value']",
    ]


def test_every_stream_is_frozen_typed_classes():
    for module in STREAMS:
        for name in module.__all__:
            cls = getattr(module, name)
            if isinstance(cls, type):
                assert issubclass(cls, events.Event), name
                assert cls.__dataclass_params__.frozen, name


def test_one_class_per_event_name():
    classes = [getattr(events, n) for n in events.__all__ if isinstance(getattr(events, n), type)]
    names = [c.name for c in classes if dataclasses.is_dataclass(c) and c is not events.Event]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_event_class_lives_in_the_one_events_module():
    """No other module of faultinject defines an event class (a rank's or a segment's event is
    an `events` class with its `rank` or `seg` set)."""
    found = []
    for path in sorted((ROOT / "faultinject").glob("*.py")):
        if path.name == "events.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                getattr(b, "id", getattr(b, "attr", "")) in {"Event", *events.__all__}
                for b in node.bases
            ):
                found.append(f"{path.name}: {node.name}")
    assert found == []
