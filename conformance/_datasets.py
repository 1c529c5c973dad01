"""Datasets that carry faults and probes into the loader's workers.

They run inside whatever worker processes the loader under test starts, so they are plain,
picklable, module-level classes (spawn and forkserver pickle them) and use only the public
``torch.utils.data.get_worker_info()``.

Probes: every fetch writes one short line to a FIFO the scenario reads (``Probe``), so a scenario
can wait, bounded and without sleeping, until a worker reached a point, and can count fetches to
check the prefetch bound. Writes are non-blocking and smaller than PIPE_BUF, hence atomic; a worker
whose reader is gone (the parent was killed) just drops the line.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

BIG_ITEM_BYTES = 8 << 20  # larger than any pipe buffer: a worker putting it blocks until read
EVERY = -1  # Fault.at matching every item


class Unpicklable:
    """A result no worker can send back (B2: pytorch#142884)."""

    def __reduce__(self) -> Any:
        raise OSError("this object cannot be pickled (loaderspec fault)")


@dataclass(frozen=True)
class Fault:
    """One fault, fired when the dataset reaches item ``at``.

    ``at`` is the dataset index (map-style) or the item number within a worker's shard
    (iterable). kind: "kill" (SIGKILL itself), "hang" (never return), "sleep" (``arg`` seconds),
    "raise" (ValueError with message ``arg``), "unrebuildable" (an exception whose constructor
    needs two arguments), "big" (return a BIG_ITEM_BYTES bytes object), "unpicklable" (return
    an object that cannot be pickled), "tensors" (return ``arg`` small tensors: one fd each under
    torch's file_descriptor sharing), "skew" (worker ``at`` sleeps ``arg`` seconds per item; ``at``
    is a worker id here). ``at == EVERY`` fires on every item.
    """

    kind: str
    at: int
    arg: Any = None


class TwoArgError(Exception):
    """An exception that cannot be rebuilt from its message alone (H1: pytorch#30147)."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")
        self.a, self.b = a, b


def _hang() -> None:
    # The fault itself, not a synchronisation: this worker never returns. SIGTERM/SIGKILL end it.
    while True:
        signal.pause()


def fire(fault: Fault) -> Any:
    """Carry out ``fault`` in the calling process; returns a replacement item where one applies."""
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.kind == "hang":
        _hang()
    elif fault.kind == "sleep":
        time.sleep(fault.arg)  # simulated slow I/O: the fault being injected
    elif fault.kind == "raise":
        raise ValueError(fault.arg)
    elif fault.kind == "unrebuildable":
        raise TwoArgError("needs", "two")
    elif fault.kind == "big":
        return b"x" * BIG_ITEM_BYTES
    elif fault.kind == "unpicklable":
        return Unpicklable()
    elif fault.kind == "tensors":
        return [torch.zeros(1) for _ in range(fault.arg)]
    return None


class Probe:
    """The scenario's end of the fetch-record FIFO (create it before the loader)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="loaderspec-probe-")
        self.path = os.path.join(self.dir, "fifo")
        os.mkfifo(self.path)
        # Non-blocking read end held open for the scenario's life, so writers never block.
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        # Our own idle writer: without one, a FIFO whose writers all closed reads as EOF forever
        # and select() would spin instead of blocking.
        self._keep = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        self._buf = b""
        self.records: list[dict[str, Any]] = []

    def _read(self, timeout_s: float) -> bool:
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout_s))
        if not ready:
            return False
        try:
            chunk = os.read(self._fd, 1 << 16)
        except BlockingIOError:
            return False
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        self.records.extend(json.loads(line) for line in lines if line)
        return True

    def drain(self) -> list[dict[str, Any]]:
        """Read whatever is there now; return every record so far."""
        while self._read(0.0):
            pass
        return self.records

    def wait_for(self, count: int, timeout_s: float, **match: Any) -> bool:
        """Wait (bounded) until ``count`` records matching ``match`` have arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.drain()
            if sum(all(r.get(k) == v for k, v in match.items()) for r in self.records) >= count:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._read(left)

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._keep)
        os.unlink(self.path)
        os.rmdir(self.dir)


def record(probe_path: str | None, event: str, index: int) -> None:
    """Write one record line to the probe FIFO; silently dropped when nobody reads."""
    if probe_path is None:
        return
    info = get_worker_info()
    line = json.dumps(
        {
            "event": event,
            "index": index,
            "worker": None if info is None else info.id,
            "pid": os.getpid(),
            "t": time.monotonic(),
        }
    ).encode()
    try:
        fd = os.open(probe_path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return
        raise
    try:
        os.write(fd, line + b"\n")
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


def _epoch(epoch_file: str | None) -> int:
    if epoch_file is None:
        return 0
    with open(epoch_file) as f:
        return int(f.read() or 0)


class MapData(Dataset):
    """Map-style: item i is ``i`` (or ``[i, epoch]`` with ``epoch_file``), faults by index."""

    def __init__(
        self,
        n: int,
        faults: tuple[Fault, ...] = (),
        *,
        probe: str | None = None,
        epoch_file: str | None = None,
    ) -> None:
        self.n = n
        self.faults = faults
        self.probe = probe
        self.epoch_file = epoch_file

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.n:
            raise IndexError(index)
        record(self.probe, "fetch", index)
        info = get_worker_info()
        item: Any = None
        for fault in self.faults:
            if fault.kind == "skew":
                if info is not None and info.id == fault.at:
                    time.sleep(fault.arg)  # the skew being injected: a slow worker
            elif fault.at in (index, EVERY):
                item = fire(fault)
        if item is None:
            item = index if self.epoch_file is None else [index, _epoch(self.epoch_file)]
        record(self.probe, "fetched", index)
        return item


class ShardedIterable(IterableDataset):
    """Worker w yields ``shard_lengths[w]`` items ``w * 1_000_000 + k``; all shards in the main
    process. Faults fire at item number ``at`` of a shard (of worker ``arg`` for "kill"/"raise"
    when ``arg`` is an int worker id; every worker otherwise)."""

    def __init__(
        self,
        shard_lengths: tuple[int, ...],
        faults: tuple[Fault, ...] = (),
        *,
        probe: str | None = None,
    ) -> None:
        self.shard_lengths = shard_lengths
        self.faults = faults
        self.probe = probe

    def __len__(self) -> int:
        return sum(self.shard_lengths)

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        shards = range(len(self.shard_lengths)) if info is None else [info.id]
        for w in shards:
            length = self.shard_lengths[w] if w < len(self.shard_lengths) else 0
            for k in range(length):
                record(self.probe, "fetch", w * 1_000_000 + k)
                for fault in self.faults:
                    if fault.kind == "skew" and fault.at == w:
                        time.sleep(fault.arg)
                    elif fault.kind != "skew" and fault.at in (k, EVERY):
                        fire(fault)
                yield w * 1_000_000 + k


def killing_collate(kill_index: int) -> Any:
    """A collate_fn that SIGKILLs its worker when the batch holds ``kill_index``."""
    return _KillingCollate(kill_index)


class _KillingCollate:
    def __init__(self, kill_index: int) -> None:
        self.kill_index = kill_index

    def __call__(self, batch: list[Any]) -> Any:
        if self.kill_index in batch:
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.utils.data.default_collate(batch)


class RaisingCollate:
    """A collate_fn that raises ValueError(message) when the batch holds ``index``."""

    def __init__(self, index: int, message: str) -> None:
        self.index, self.message = index, message

    def __call__(self, batch: list[Any]) -> Any:
        if self.index in batch:
            raise ValueError(self.message)
        return torch.utils.data.default_collate(batch)


class RaisingInit:
    """A worker_init_fn that raises ValueError in worker ``worker_id``."""

    def __init__(self, worker_id: int, message: str) -> None:
        self.worker_id, self.message = worker_id, message

    def __call__(self, worker_id: int) -> None:
        if worker_id == self.worker_id:
            raise ValueError(self.message)


class InfoInit:
    """A worker_init_fn recording worker_info through the probe (event "init")."""

    def __init__(self, probe: str) -> None:
        self.probe = probe

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        line = {
            "worker_id_arg": worker_id,
            "id": info.id,
            "num_workers": info.num_workers,
            "seed": info.seed,
            "torch_seed": torch.initial_seed(),
        }
        record_json(self.probe, {"event": "init", "pid": os.getpid(), **line})


def record_json(probe_path: str, payload: dict[str, Any]) -> None:
    """Write an arbitrary small JSON record to the probe."""
    try:
        fd = os.open(probe_path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, json.dumps(payload).encode() + b"\n")
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
