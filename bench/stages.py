"""Where a cheap batch's CPU goes, per stage and per process: reference, torch and nodes-thread.

Owns one section, ``stages``: two kinds of figure per loader for the cheap workload (64 floats
per item, batch 4, 2 workers), both CPU time, never wall time (on a shared machine the CPU a
batch costs stays put while its wall time follows the neighbours):

* **each stage in isolation**: the loader's own functions, run in one process over many batches
  (the best of ``_ROUNDS`` rounds of ``_BATCHES``, ``time.process_time``): the worker reads an
  index, takes its protocol step, fetches the items, collates, serializes and writes the batch;
  the main process sends the index, reads and deserializes the result and takes its protocol
  steps up to the hand-out. A pipe here is a real pipe, written and read back by the same
  process (``_PIPE_BATCH`` messages at a time, each side timed apart), so nobody sleeps or is
  woken. The reference's readers read ahead, so there its read stage is the best case (every
  waiting message in one read): in a real cheap epoch its main process finds 1-2 results per
  read (0.8 reads per batch, strace);
* **measured**: one epoch in a fresh interpreter (faultinject's sandbox, spawn), the CPU of the
  loader's process and of its live workers over ``_WINDOW`` batches after a warm-up, so
  start-up and shutdown are not counted, per batch: ``bench.cpu``, the method the throughput
  section uses over its rate's window.

``other`` is measured minus the sum of the stages, per process: what no stage shows in isolation:
sleeping and being woken (a ``poll`` or ``read`` that blocks, the write that wakes it, the
scheduler), caches shared with the other processes, and a loader's machinery not listed (torch's
feeder thread and queue locks, torchdata's node graph). A stage a loader does not have (no pipe
between torchdata's threads), or cannot be cut out of it, is ``n/a: <why>``.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import pickle
import queue
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

import torch
from loaderspec.faultinject import loaders, sandbox
from torch.utils.data import default_collate
from torch.utils.data._utils import worker as torch_worker
from torch.utils.data._utils.fetch import _MapDatasetFetcher

from bench import datasets
from bench.cpu import CpuWindow
from bench.loaders import LOADERS
from bench.rows import Row, na

SECTION = "stages"
LOADERS_MEASURED = ("reference", "torch", "nodes-thread")
BATCH, WIDTH, WORKERS = 4, 64, 2
_BATCHES = {False: 5000, True: 200}  # per round, in isolation
_ROUNDS = {False: 5, True: 2}
_WINDOW = {False: 20_000, True: 1_000}  # batches of the real run measured, after the warm-up
_WARMUP = 200
_PIPE_BATCH = 32  # messages written before they are read back (~40 KB: inside a 64 KiB pipe)

# The stages, in a batch's order. "main" is the loader's own process (nodes-thread's threads
# live there), "worker" its worker processes.
STAGES = (
    "send index",
    "read index",
    "protocol step (worker)",
    "fetch (4 x __getitem__)",
    "collate",
    "serialize",
    "write",
    "read",
    "deserialize",
    "hand-off between threads",
    "protocol steps + hand-out (main)",
)
# The real run's figures, and what the stages leave unexplained.
MEASURED = (
    "sum of the stages, main",
    "sum of the stages, workers",
    "measured, main",
    "measured, workers",
    "measured, total",
    "other, main (measured - stages)",
    "other, workers (measured - stages)",
)
# A stage's figure: (process, us per batch, how it was taken), or the reason it has none.
StageFigure = tuple[str, float, str] | str


def _cpu_us(body: Callable[[int], None], n: int, rounds: int) -> float:
    """Microseconds of this process's CPU per batch for ``body(n)`` (n batches), best round."""
    body(max(n // 10, 1))  # warm up: imports, caches, the allocator
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        body(n)
        best = min(best, time.process_time() - start)
    return best / n * 1e6


def _loop(step: Callable[[], Any]) -> Callable[[int], None]:
    def body(n: int) -> None:
        for _ in range(n):
            step()

    return body


def _pipe() -> tuple[Connection, Connection]:
    r, w = os.pipe()
    return Connection(r, writable=False), Connection(w, readable=False)


def _write_read_us(
    write: Callable[[], None], read: Callable[[], Any], n: int, rounds: int
) -> tuple[float, float]:
    """(write, read) microseconds per message through one pipe, each side timed apart."""
    best_w = best_r = float("inf")
    for _ in range(rounds + 1):  # the first round warms up
        tw = tr = 0.0
        for done in range(0, n, _PIPE_BATCH):
            k = min(_PIPE_BATCH, n - done)
            start = time.process_time()
            for _ in range(k):
                write()
            mid = time.process_time()
            for _ in range(k):
                read()
            tw += mid - start
            tr += time.process_time() - mid
        best_w, best_r = min(best_w, tw), min(best_r, tr)
    return best_w / n * 1e6, best_r / n * 1e6


def _items() -> list[torch.Tensor]:
    return [torch.full((WIDTH,), float(i)) for i in range(BATCH)]


def _fetch_us(n: int, rounds: int) -> float:
    """torch's map-style fetcher over the bench's dataset, its collate left out (identity)."""
    dataset = datasets.Floats(BATCH * 64, 0.0, WIDTH)
    fetcher = _MapDatasetFetcher(dataset, True, lambda batch: batch, False)
    index = list(range(BATCH))
    return _cpu_us(_loop(lambda: fetcher.fetch(index)), n, rounds)


class _InWorker:
    """``get_worker_info()`` says "a worker" inside the block, as in a worker process (where
    ``default_collate`` collates into shared memory)."""

    def __enter__(self) -> None:
        self._saved = torch_worker._worker_info
        torch_worker._worker_info = torch_worker.WorkerInfo(
            id=0, num_workers=WORKERS, seed=0, dataset=datasets.Floats(0)
        )

    def __exit__(self, *exc: object) -> None:
        torch_worker._worker_info = self._saved


# ------------------------------------------------------------------ the reference ----------
class _InstantPort:
    """The main process's port with no IO: a task's result is there at the next wait."""

    def __init__(self, payload: Any) -> None:
        self.payload = payload
        self.sent: collections.deque[tuple[int, int]] = collections.deque()
        self.index = iter(range(1 << 62))

    def next_index(self) -> Any:
        return next(self.index)

    def send(self, worker: int, message: Any) -> None:
        self.sent.append((worker, message.idx))

    def wait(self) -> Any:
        from loaderspec.reference.messages import Arrived, Result
        from loaderspec.reference.steps import Kind

        worker, idx = self.sent.popleft()
        return Arrived(worker, Result(idx, Kind.DATA, self.payload))

    # The rest of loop.Port: a started epoch's steps on a port with no pin thread never ask
    # for them (the epoch never ends).
    def set_pin_done(self, take_step: Callable[[], None]) -> None:
        raise AssertionError("the instant port has no pin thread")

    def join_pin_thread(self) -> None:
        raise AssertionError("the instant port has no pin thread")

    def set_workers_done(self, take_step: Callable[[], None]) -> None:
        raise AssertionError("the instant port's epoch never ends")

    def reap(self, workers: list[int], *, grace: bool, block: bool) -> Iterator[tuple[int, bool]]:
        raise AssertionError("the instant port's epoch never ends")

    def shut_down(self) -> None:
        raise AssertionError("the instant port's epoch never ends")


def _reference(n: int, rounds: int) -> dict[str, StageFigure]:
    from loaderspec.reference import loop, wire
    from loaderspec.reference.arena import MainArena, WorkerArena, small_batches_private
    from loaderspec.reference.channels import Receiver
    from loaderspec.reference.core import ProtocolConfig, ProtocolCore
    from loaderspec.reference.messages import Result, Task
    from loaderspec.reference.steps import Kind
    from loaderspec.reference.worker import _index_message
    from loaderspec.reference.worker_core import WorkerCore

    from loaderspec.vocabulary import Action

    out: dict[str, StageFigure] = {}
    index_r, index_w = _pipe()
    indexes = wire.index_reader(index_r)
    task = Task(7, list(range(BATCH))).to_wire()
    send_us, read_us = _write_read_us(
        lambda: wire.send_index(index_w, task),
        lambda: _index_message(indexes.recv()),
        n,
        rounds,
    )
    out["send index"] = ("main", send_us, "wire.send_index: pickle + one write")
    out["read index"] = ("worker", read_us, "wire.index_reader's recv + the Task")

    done = multiprocessing.get_context("fork").Event()
    core = WorkerCore(0, iterable=False)
    message = _index_message(task)
    batch = default_collate(_items())

    def worker_step() -> None:
        step = core.next_action(message, done.is_set())
        result = loop.take(core, Action.WORKER_FETCH, step.task, Kind.DATA, batch)
        loop.take(core, Action.WORKER_PUT, result)

    out["protocol step (worker)"] = (
        "worker",
        _cpu_us(_loop(worker_step), n, rounds),
        "done event, next_action, WorkerFetch and WorkerPut taken",
    )
    out["fetch (4 x __getitem__)"] = ("worker", _fetch_us(n, rounds), "torch's fetcher")
    collate = small_batches_private(default_collate)
    items = _items()
    with _InWorker():
        out["collate"] = ("worker", _cpu_us(_loop(lambda: collate(items)), n, rounds), "private")
    main_arena = MainArena()
    arena = WorkerArena(main_arena.handle())
    wire_result = Result(7, Kind.DATA, batch).to_wire()
    out["serialize"] = (
        "worker",
        _cpu_us(_loop(lambda: wire.pack(wire_result, arena)), n, rounds),
        "wire.pack, with the worker's arena",
    )
    parts = wire.pack(wire_result, arena)
    body = parts[0][1:]
    result_r, result_w = _pipe()
    sentinel_r, sentinel_w = os.pipe()  # a worker's sentinel: never ready here
    receiver = Receiver([result_r], [sentinel_r], [main_arena])

    def receive() -> None:
        while not receiver.inbox:
            receiver.poll(None)
        receiver.inbox.popleft()

    write_us, recv_us = _write_read_us(lambda: wire.write(result_w, parts), receive, n, rounds)
    loads_us = _cpu_us(_loop(lambda: pickle.loads(body)), n, rounds)
    out["write"] = ("worker", write_us, "wire.write")
    out["read"] = ("main", recv_us - loads_us, "channels.Receiver: poll, reads, the event")
    out["deserialize"] = ("main", loads_us, "the tensor rebuilt over the bytes read")
    out["hand-off between threads"] = "n/a: no pin thread (pin_memory=False)"

    core_main = ProtocolCore(ProtocolConfig(num_workers=WORKERS, prefetch_factor=2))
    port = _InstantPort(batch)
    loop.start_epoch(core_main, port, resume=False)

    def main_step() -> None:
        loop.hand_out(core_main, loop.next_batch(core_main, port).payload)

    out["protocol steps + hand-out (main)"] = (
        "main",
        _cpu_us(_loop(main_step), n, rounds),
        "loop.next_batch + hand_out on a port with no IO",
    )
    receiver.close()
    for conn in (index_r, index_w, result_w):
        conn.close()
    os.close(sentinel_r)
    os.close(sentinel_w)
    main_arena.close()
    return out


# ------------------------------------------------------------------ torch -------------------
def _torch(n: int, rounds: int) -> dict[str, StageFigure]:
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing as torch_mp

    out: dict[str, StageFigure] = {
        "send index": "n/a: a queue put hands the index to a feeder thread"
    }
    index_queue = torch_mp.get_context("fork").Queue()
    task = (7, list(range(BATCH)))

    def gets(k: int) -> float:
        """CPU of ``k`` gets of messages already in the queue's pipe (puts untimed)."""
        cpu = 0.0
        for done in range(0, k, _PIPE_BATCH):
            m = min(_PIPE_BATCH, k - done)
            for _ in range(m):
                index_queue.put(task)
            while index_queue._buffer:  # type: ignore[attr-defined]  # the feeder's backlog
                time.sleep(0.001)
            start = time.process_time()
            for _ in range(m):
                index_queue.get(timeout=5.0)
            cpu += time.process_time() - start
        return cpu

    gets(max(n // 10, 1))
    best = min(gets(n) for _ in range(rounds))
    index_queue.close()
    index_queue.join_thread()
    out["read index"] = ("worker", best / n * 1e6, "mp.Queue.get")
    out["protocol step (worker)"] = "n/a: not separable from torch's _worker_loop"
    out["fetch (4 x __getitem__)"] = ("worker", _fetch_us(n, rounds), "torch's fetcher")
    items = _items()
    with _InWorker():
        collate_us = _cpu_us(_loop(lambda: default_collate(items)), n, rounds)
        batch = default_collate(items)
        # Each message shares a fresh segment's fd, held by the resource sharer until the
        # reader fetches it: dumps and loads alternate, _PIPE_BATCH at a time, fds bounded.
        few = max(n // 10, _PIPE_BATCH)
        fresh = [default_collate(items) for _ in range(_PIPE_BATCH)]
        sent: list[Any] = []
        dumps_us, loads_us = _write_read_us(
            lambda: sent.append(ForkingPickler.dumps((7, fresh[len(sent)]))),
            lambda: ForkingPickler.loads(sent.pop()),
            few,
            rounds,
        )
    out["collate"] = ("worker", collate_us, "into a shared-memory segment")
    out["serialize"] = ("worker", dumps_us, "ForkingPickler: the storage's fd shared")
    payload = bytes(ForkingPickler.dumps((7, batch)))
    r, w = _pipe()
    write_us, read_us = _write_read_us(lambda: w.send_bytes(payload), r.recv_bytes, n, rounds)
    r.close()
    w.close()
    out["write"] = ("worker", write_us, "the feeder thread's send_bytes")
    out["read"] = ("main", read_us, "recv_bytes")
    out["deserialize"] = ("main", loads_us, "ForkingPickler: the fd fetched, the segment mapped")
    out["hand-off between threads"] = "n/a: no pin thread (pin_memory=False)"
    out["protocol steps + hand-out (main)"] = "n/a: not separable from torch's _next_data"
    return out


# ------------------------------------------------------------------ nodes-thread ------------
def _nodes_thread(n: int, rounds: int) -> dict[str, StageFigure]:
    items = _items()
    handoff: queue.Queue[Any] = queue.Queue()

    def hand(k: int) -> None:
        for _ in range(k):
            handoff.put(items)
            handoff.get()

    no_pipe = "n/a: threads pass the batch by reference"
    return {
        "send index": no_pipe,
        "read index": no_pipe,
        "protocol step (worker)": "n/a: not separable from torchdata's ParallelMapper",
        "fetch (4 x __getitem__)": ("main", _fetch_us(n, rounds), "torch's fetcher, a thread"),
        "collate": (
            "main",
            _cpu_us(_loop(lambda: default_collate(items)), n, rounds),
            "a thread",
        ),
        "serialize": no_pipe,
        "write": no_pipe,
        "read": no_pipe,
        "deserialize": no_pipe,
        "hand-off between threads": ("main", _cpu_us(hand, n, rounds), "queue.Queue put + get"),
        "protocol steps + hand-out (main)": "n/a: not separable from torchdata's node graph",
    }


_STAGES: dict[str, Callable[[int, int], dict[str, StageFigure]]] = {
    "reference": _reference,
    "torch": _torch,
    "nodes-thread": _nodes_thread,
}


# ------------------------------------------------------------------ the real run ------------
def _measured(loader: str, window: int) -> dict[str, float]:
    """One cheap epoch: CPU us per batch of the loader's process and of its workers over
    ``window`` batches after a warm-up (``bench.cpu``, the throughput section's method), and
    the load average then."""
    loader_cls = loaders.resolve(LOADERS[loader])
    dataset = datasets.Floats((_WARMUP + window + 10) * BATCH, 0.0, WIDTH)
    loader_obj = loader_cls(dataset, batch_size=BATCH, num_workers=WORKERS)
    it: Iterator[Any] = iter(loader_obj)
    cpu = CpuWindow()
    used: dict[str, float | int] = {}
    for count, _batch in enumerate(it, 1):
        if count == _WARMUP:
            cpu.start()
        elif count == _WARMUP + window:
            used = cpu.stop()
            break
    else:
        raise RuntimeError(f"the epoch ended after {count} batches")
    if used["workers_lost"]:
        raise RuntimeError(f"{used['workers_lost']} worker(s) ended inside the measured window")
    del it, loader_obj
    return {
        "main": used["main_s"] / window * 1e6,
        "workers": used["workers_s"] / window * 1e6,
        "load": os.getloadavg()[0],
    }


def _target(loader: str, quick: bool) -> tuple[dict[str, float], dict[str, StageFigure]]:
    """The sandbox target: one cheap epoch measured, then each stage in isolation."""
    measured = _measured(loader, _WINDOW[quick])
    return measured, _STAGES[loader](_BATCHES[quick], _ROUNDS[quick])


def rows(names: dict[str, str | None], quick: bool, progress: Callable[[str], None]) -> list[Row]:
    """Per loader (of ``LOADERS_MEASURED`` asked for): a row per stage (``STAGES``) and per
    figure of the real run (``MEASURED``); a loader that fails has every row ``n/a``."""
    out: list[Row] = []
    for loader in (name for name in LOADERS_MEASURED if name in names):
        label = f"stages {loader}"
        reason = names[loader]
        if not reason:
            progress(f"stages: {loader}")
            report = sandbox.run(_target, loader, quick, deadline_s=300.0, start="spawn")
            if report.outcome == "returned":
                measured, figures = report.value
                out += _loader_rows(label, measured, figures, _WINDOW[quick])
                continue
            reason = ((report.error or "").strip().splitlines() or [report.outcome])[-1]
        out += [Row(SECTION, f"{label}: {s}", None, "us/batch", na(reason)) for s in STAGES]
        out += [Row(SECTION, f"{label}: {m}", None, "us/batch", na(reason)) for m in MEASURED]
    return out


def _loader_rows(
    label: str, measured: dict[str, float], stages: dict[str, StageFigure], window: int
) -> list[Row]:
    out: list[Row] = []
    summed = {"main": 0.0, "worker": 0.0}
    for stage in STAGES:
        figure = stages[stage]
        if isinstance(figure, str):
            out.append(Row(SECTION, f"{label}: {stage}", None, "us/batch", figure))
            continue
        process, value, how = figure
        summed[process] += value
        out.append(Row(SECTION, f"{label}: {stage}", value, "us/batch", f"{process}; {how}"))
    note = f"{window:,} batches, load {measured['load']:.1f}"
    has_workers = "workers" in measured and summed["worker"] > 0
    figures = {
        "sum of the stages, main": (summed["main"], "in isolation"),
        "sum of the stages, workers": (summed["worker"], "in isolation"),
        "measured, main": (measured["main"], note),
        "measured, workers": (measured["workers"], note),
        "measured, total": (measured["main"] + measured["workers"], note),
        "other, main (measured - stages)": (measured["main"] - summed["main"], ""),
        "other, workers (measured - stages)": (
            measured["workers"] - summed["worker"] if has_workers else 0.0,
            "" if has_workers else "no worker processes",
        ),
    }
    out += [Row(SECTION, f"{label}: {m}", *_value_note(figures[m])) for m in MEASURED]
    return out


def _value_note(figure: tuple[float, str]) -> tuple[float, str, str]:
    return figure[0], "us/batch", figure[1]
