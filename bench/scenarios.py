"""The scenario child: ``python -m bench.scenarios SPEC_JSON`` runs one loader, prints events.

Runs in a process of its own, started and killed by ``bench.proc``, so a loader that hangs,
crashes or leaks costs the benchmark a deadline, never the run. Each scenario prints JSON lines
(``{"event": ...}``) on stdout; the parent times what happens outside (process exits) and the
child times what happens inside (an exception's arrival, a ``del``'s return).

This module must not import the parent's modules beyond ``bench.datasets`` and ``bench.loaders``.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench import datasets
from bench.loaders import resolve

STUCK_WAIT_S = 60.0  # for a worker to reach the stuck item (start-up on loaded cores)
# An item larger than any result pipe (64 KiB by default, 1 MiB grown): its writer blocks.
BLOCKED_ITEM_BYTES = 2 << 20


def emit(**event: Any) -> None:
    """One event line to the parent, in one ``write`` (the parent may act on it at once).

    Not ``print``: torch's SIGCHLD handler raises asynchronously, and between print's two
    writes (text, then newline) it would leave half a line for the next event to join.
    A single write of less than PIPE_BUF bytes is atomic.
    """
    os.write(sys.stdout.fileno(), (json.dumps(event) + "\n").encode())


def _live_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]


def _new_children(before: set[int]) -> list[int]:
    return [p.pid for p in _live_children() if p.pid not in before]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]


# --------------------------------------------------------------------------------------------
# Throughput


def _dataset(spec: dict[str, Any]) -> Any:
    kind = spec["kind"]
    if kind == "floats":
        return datasets.Floats(spec["n"], cost_s=spec.get("cost_s", 0.0), width=spec["width"])
    raise ValueError(f"unknown dataset kind {kind!r}")


def _self_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads (the pin thread too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu_s() -> float:
    """CPU seconds of the children reaped so far (the workers, once joined)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def throughput(spec: dict[str, Any]) -> None:
    """For each workload: one epoch; batches/s from the first batch to the last."""
    loader_cls = resolve(spec["loader"])
    for work in spec["workloads"]:
        name = work["name"]
        before = {p.pid for p in _live_children()}
        try:
            loader = loader_cls(
                _dataset(work["dataset"]),
                batch_size=work["batch_size"],
                num_workers=work["num_workers"],
            )
            kids_before = _children_cpu_s()
            start = time.perf_counter()
            it = iter(loader)
            first = None
            main_first = 0.0
            count = 0
            for _batch in it:
                count += 1
                if first is None:
                    first = time.perf_counter()
                    main_first = _self_cpu_s()
            last = time.perf_counter()
            main_cpu = _self_cpu_s() - main_first
            del it, loader
            gc.collect()
            # Workers reaped at the epoch's end are in RUSAGE_CHILDREN (their start-up too).
            workers_cpu = _children_cpu_s() - kids_before
        except Exception as exc:  # a failing loader is a row with a reason, not a dead bench
            emit(event="error", workload=name, error=_error_text(exc))
            continue
        rate = (count - 1) / (last - first) if first is not None and count > 1 else None
        emit(
            event="throughput",
            workload=name,
            batches=count,
            batches_per_s=rate,
            startup_s=(first - start) if first is not None else None,
            leftover=len(_new_children(before)),
            main_cpu_per_batch_s=main_cpu / (count - 1) if count > 1 else None,
            workers_cpu_per_batch_s=workers_cpu / count if count else None,
        )
    emit(event="done")


# --------------------------------------------------------------------------------------------
# Faults


def worker_death(spec: dict[str, Any]) -> None:
    """SIGKILL a worker that has tasks; time until ``next()`` raises, then call ``next()`` again.

    Events: ``death`` (how the first ``next()`` after the kill ended, and when), then ``later``
    (what up to ``LATER_CALLS`` more calls did: raised at once, ended, or handed out batches).
    A call that hangs sends nothing: the parent's deadline counts it.
    """
    loader_cls = resolve(spec["loader"])
    before = {p.pid for p in _live_children()}
    loader = loader_cls(datasets.Sleepy(10_000, spec["delay_s"]), batch_size=1, num_workers=2)
    it = iter(loader)
    next(it)
    workers = _new_children(before)
    emit(event="workers", pids=workers)
    victim = workers[0]
    after = 0
    killed = time.monotonic()
    try:
        # Inside the try: torch's SIGCHLD handler may raise as soon as kill() returns.
        os.kill(victim, signal.SIGKILL)
        while True:
            next(it)
            after += 1
    except StopIteration:
        emit(
            event="death",
            outcome="StopIteration",
            latency_s=time.monotonic() - killed,
            batches_after_kill=after,
            victim=victim,
        )
        return
    except Exception as exc:
        emit(
            event="death",
            outcome="raised",
            latency_s=time.monotonic() - killed,
            batches_after_kill=after,
            error=_error_text(exc),
            victim=victim,
        )
    emit(event="later", **_later_calls(it))


LATER_CALLS = 20


def _later_calls(it: Any) -> dict[str, Any]:
    """Call ``next(it)`` until it raises or ends, at most ``LATER_CALLS`` times; say how.

    torch's SIGCHLD handler raises asynchronously, at any bytecode: the whole loop is inside
    the ``try``, so an error raised between two calls is counted too.
    """
    start = time.monotonic()
    first_s = None
    batches = 0
    outcome = "batches"
    error = ""
    t = start
    try:
        for _ in range(LATER_CALLS):
            t = time.monotonic()
            next(it)
            batches += 1
            if first_s is None:
                first_s = time.monotonic() - t
    except StopIteration:
        outcome = "StopIteration"
    except Exception as exc:
        outcome, error = "raised", _error_text(exc)
    if first_s is None:
        first_s = time.monotonic() - t
    return {
        "outcome": outcome,
        "first_s": first_s,
        "batches": batches,
        "total_s": time.monotonic() - start,
        "error": error,
    }


def orphan(spec: dict[str, Any]) -> None:
    """Start workers in ``spec["state"]``, report their PIDs, then wait to be SIGKILLed.

    * ``idle``: one batch taken per worker, then nothing asked: they wait for an index.
    * ``busy``: every item spins; each worker is inside ``__getitem__``.
    * ``blocked``: 2 MiB items of bytes and nobody reads: the workers' result pipe fills.

    The parent learns "busy" and "blocked" from the FIFO ``spec["fifo"]`` (and, for blocked,
    from the kernel: a worker thread waiting in ``pipe_write``).
    """
    loader_cls = resolve(spec["loader"])
    before = {p.pid for p in _live_children()}
    state = spec["state"]
    if state == "busy":
        loader = loader_cls(datasets.Busy(1000, spec["fifo"]), batch_size=1, num_workers=2)
        it = iter(loader)
    elif state == "blocked":
        blobs = datasets.Blobs(1000, BLOCKED_ITEM_BYTES, spec["fifo"])
        loader = loader_cls(blobs, batch_size=1, num_workers=2)
        it = iter(loader)  # prefetch starts; we never read a result
    else:
        loader = loader_cls(datasets.Floats(100_000, width=64), batch_size=4, num_workers=2)
        it = iter(loader)
        # Two batches: round-robin, so each worker has run its loop; the rest of the prefetch
        # is cheap, so both are idle (waiting for an index) moments later.
        next(it)
        next(it)
    emit(event="workers", pids=_new_children(before))
    sys.stdin.read()  # blocks until the parent kills us (or closes stdin: then we clean up)
    del it


def _await_line(fifo_fd: int, timeout_s: float) -> bool:
    """Whether a line arrives on the FIFO within ``timeout_s``."""
    ready, _, _ = select.select([fifo_fd], [], [], timeout_s)
    return bool(ready) and bool(os.read(fifo_fd, 4096))


def shutdown_stuck(spec: dict[str, Any]) -> None:
    """One worker stuck in ``__getitem__``; time ``del it`` and count what it leaves behind."""
    loader_cls = resolve(spec["loader"])
    before = {p.pid for p in _live_children()}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        fifo = os.path.join(tmp, "stuck")
        os.mkfifo(fifo)
        # O_RDWR: holding both ends, neither we nor the worker's open() ever blocks.
        fifo_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            loader = loader_cls(datasets.HangAt(100, 1, fifo), batch_size=1, num_workers=2)
            it = iter(loader)
            next(it)  # item 0, from worker 0; worker 1 gets item 1 and sticks
            workers = _new_children(before)
            emit(event="workers", pids=workers)
            if not _await_line(fifo_fd, STUCK_WAIT_S):
                emit(event="error", error=f"no worker got stuck within {STUCK_WAIT_S} s")
                return
            start = time.monotonic()
            # The loader too: torchdata's StatefulDataLoader keeps its iterator (for
            # state_dict), so only dropping both is a shutdown for every loader.
            del it, loader
            gc.collect()
            took = time.monotonic() - start
        finally:
            os.close(fifo_fd)
    procs = [psutil.Process(pid) for pid in workers if psutil.pid_exists(pid)]
    alive = [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    zombies = [p.pid for p in procs if p.is_running() and p.status() == psutil.STATUS_ZOMBIE]
    emit(event="shutdown", shutdown_s=took, alive=alive, zombies=zombies)


SCENARIOS: dict[str, Callable[[dict[str, Any]], None]] = {
    "throughput": throughput,
    "worker_death": worker_death,
    "orphan": orphan,
    "shutdown_stuck": shutdown_stuck,
}


def main(argv: list[str]) -> int:
    """Run the scenario named in the JSON spec ``argv[1]``; errors become an event."""
    spec = json.loads(argv[1])
    try:
        SCENARIOS[spec["scenario"]](spec)
    except Exception as exc:
        emit(event="error", error=_error_text(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
