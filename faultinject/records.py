"""Fetch records: which worker fetched what, and when; and a bounded wait for them.

With `record_dir`, a faulty dataset appends one JSON line per event to
`record_dir/fetch-<pid>.jsonl` (one file per process, so writers never interleave). A fetch
writes `event == "fetch"` when it *starts* (before any fault fires, so a worker killed at item k
still leaves its record) and `event == "fetched"` once the item exists (about to be returned);
just before a fault fires, `event == "fault"` with `fault` naming it. Fields: `t`
(`time.monotonic()` seconds; CLOCK_MONOTONIC is system-wide on Linux, so `t` compares across
processes and with the harness's own `time.monotonic()`), `pid`, `worker_id` (None in the main
process), `index` (map-style: the dataset index; iterable: the item value), `epoch_hint` (how
many times this `index` was fetched before, by any process sharing the dir; -1 on other events),
`k` (the item's position in its shard, iterable only), `fault` and `tid` (the native id of the
thread that wrote it: a thread-based loader's workers share one pid). `faultinject.worker_init`
writes one `WorkerInit` per worker start to `init-<pid>.jsonl`.

`RecordWatch(record_dir)` waits, bounded and without polling, until the records say something
(`wait_for`): every record also pokes a FIFO in the dir that the watcher holds open, so the
watcher sleeps in `select` until a record arrives or the time is up. Writers never block on it
(non-blocking open and write; no reader, no poke).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from loaderspec.faultinject import _jsonl

__all__ = [
    "Fetch",
    "RecordWatch",
    "WorkerInit",
    "next_epoch_hint",
    "read_fetches",
    "read_inits",
    "write_fetch",
    "write_init",
]

_WAKE = "wake.fifo"


@dataclass(frozen=True)
class Fetch:
    """One record of a fetch (`"fetch"`, `"fetched"`) or of a fault firing (`"fault"`)."""

    t: float
    pid: int
    worker_id: int | None
    index: int
    epoch_hint: int
    event: str = "fetch"
    fault: str | None = None
    k: int | None = None
    tid: int | None = None


@dataclass(frozen=True)
class WorkerInit:
    """What a worker saw when its `worker_init_fn` ran: `worker_init_fn`'s argument, torch's
    `get_worker_info()` (id, num_workers, seed), `torch.initial_seed()` and the thread's native
    id."""

    t: float
    pid: int
    worker_id_arg: int
    worker_id: int
    num_workers: int
    seed: int
    torch_seed: int
    tid: int | None = None


def _poke(record_dir: str | os.PathLike[str]) -> None:
    """Wake a `RecordWatch` on `record_dir`, if one is there; never blocks, never fails."""
    try:
        fd = os.open(Path(record_dir) / _WAKE, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no watcher (ENXIO: no reader; ENOENT: no FIFO)
        return
    try:
        with contextlib.suppress(BlockingIOError):  # the FIFO is full: the watcher is awake
            os.write(fd, b"\n")
    finally:
        os.close(fd)


def write_fetch(record_dir: str | os.PathLike[str], fetch: Fetch) -> None:
    """Append `fetch` to this process's file in `record_dir`."""
    _jsonl.append(Path(record_dir) / f"fetch-{os.getpid()}.jsonl", fetch.__dict__)
    _poke(record_dir)


def write_init(record_dir: str | os.PathLike[str], init: WorkerInit) -> None:
    """Append `init` to this process's init file in `record_dir`."""
    _jsonl.append(Path(record_dir) / f"init-{os.getpid()}.jsonl", init.__dict__)
    _poke(record_dir)


def read_fetches(
    record_dir: str | os.PathLike[str], *, faults: bool = False, fetched: bool = False
) -> list[Fetch]:
    """The `"fetch"` records in `record_dir`, ordered by time.

    Args:
        record_dir: the dataset's `record_dir`.
        faults: also return the `"fault"` records.
        fetched: also return the `"fetched"` records (an item made, about to be returned).
    """
    fields = set(Fetch.__dataclass_fields__)
    wanted = {"fetch", *(["fault"] if faults else []), *(["fetched"] if fetched else [])}
    out = [
        Fetch(**{k: v for k, v in rec.items() if k in fields})
        for rec in _jsonl.read_all(record_dir, "fetch-*.jsonl")
    ]
    return sorted((f for f in out if f.event in wanted), key=lambda f: (f.t, f.pid))


def read_inits(record_dir: str | os.PathLike[str]) -> list[WorkerInit]:
    """Every `WorkerInit` recorded in `record_dir`, ordered by time."""
    fields = set(WorkerInit.__dataclass_fields__)
    inits = [
        WorkerInit(**{k: v for k, v in rec.items() if k in fields})
        for rec in _jsonl.read_all(record_dir, "init-*.jsonl")
    ]
    return sorted(inits, key=lambda i: (i.t, i.pid))


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


class RecordWatch:
    """Waits for records in `record_dir` (a context manager; create it before the loader).

    Holds the read end of the dir's wake FIFO (and an idle write end of its own, so that the
    FIFO never reads as EOF and `select` sleeps instead of spinning); every record written to
    the dir wakes it.
    """

    def __init__(self, record_dir: str | os.PathLike[str]) -> None:
        self.record_dir = Path(record_dir)
        self.record_dir.mkdir(parents=True, exist_ok=True)
        path = self.record_dir / _WAKE
        with contextlib.suppress(FileExistsError):
            os.mkfifo(path)
        self._read = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._keep = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def wait_for(self, done: Callable[[list[Fetch]], bool], timeout_s: float) -> bool:
        """Wait up to `timeout_s` until `done(records)` holds for the fetch, fetched and fault
        records so far; whether it did."""
        deadline = time.monotonic() + timeout_s
        while True:
            if done(read_fetches(self.record_dir, faults=True, fetched=True)):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self._read], [], [], left)
            if ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._read, 1 << 16)

    def wait_count(
        self, count: int, timeout_s: float, *, event: str = "fetch", index: int | None = None
    ) -> bool:
        """Wait up to `timeout_s` until `count` records of `event` (of item `index`, if given)
        were written; whether they were."""

        def done(records: list[Fetch]) -> bool:
            hits = [r for r in records if r.event == event and index in (None, r.index)]
            return len(hits) >= count

        return self.wait_for(done, timeout_s)

    def close(self) -> None:
        """Close the FIFO's ends (writers then find no reader and stop poking)."""
        for fd in (self._read, self._keep):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            (self.record_dir / _WAKE).unlink()

    def __enter__(self) -> RecordWatch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
