"""Fetch records: which worker fetched what, and when.

With `record_dir`, a faulty dataset appends one JSON line per fetch to
`record_dir/fetch-<pid>.jsonl` (one file per process, so writers never interleave), written when
the fetch *starts* (before any fault fires, so a worker killed at item k still leaves its record).
Fields: `t` (`time.monotonic()` seconds; CLOCK_MONOTONIC is system-wide on Linux, so `t` compares
across processes and with the harness's own `time.monotonic()`), `pid`, `worker_id` (None in the
main process), `index` (map-style: the dataset index; iterable: the item value), `epoch_hint`
(how many times this `index` was fetched before, by any process sharing the dir), plus `k` (the
item's position in its shard, iterable only) and `fault` (the fault that fired on this fetch, by
class name, or None; a record with `event == "fault"` is written just before the fault fires).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from faultinject import _jsonl

__all__ = ["Fetch", "next_epoch_hint", "read_fetches", "write_fetch"]


@dataclass(frozen=True)
class Fetch:
    """One record of a fetch (`event == "fetch"`) or of a fault firing (`event == "fault"`)."""

    t: float
    pid: int
    worker_id: int | None
    index: int
    epoch_hint: int
    event: str = "fetch"
    fault: str | None = None
    k: int | None = None


def write_fetch(record_dir: str | os.PathLike[str], fetch: Fetch) -> None:
    """Append `fetch` to this process's file in `record_dir`."""
    _jsonl.append(Path(record_dir) / f"fetch-{os.getpid()}.jsonl", fetch.__dict__)


def read_fetches(record_dir: str | os.PathLike[str], *, faults: bool = False) -> list[Fetch]:
    """Every fetch recorded in `record_dir`, ordered by time.

    Args:
        record_dir: the dataset's `record_dir`.
        faults: also return the `event == "fault"` records.
    """
    fields = set(Fetch.__dataclass_fields__)
    out = [
        Fetch(**{k: v for k, v in rec.items() if k in fields})
        for rec in _jsonl.read_all(record_dir, "fetch-*.jsonl")
    ]
    if not faults:
        out = [f for f in out if f.event == "fetch"]
    return sorted(out, key=lambda f: (f.t, f.pid))


def next_epoch_hint(record_dir: str | os.PathLike[str], index: int) -> int:
    """Claim and return the number of earlier fetches of `index` (an `O_EXCL` marker per fetch,
    so processes never claim the same number)."""
    marks = Path(record_dir) / "seen"
    marks.mkdir(exist_ok=True)
    n = 0
    while True:
        try:
            fd = os.open(marks / f"{index}.{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return n
