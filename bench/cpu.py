"""CPU per batch: one method for every section that reports it (throughput, stages).

The question it answers: what a batch costs in CPU, per process, once the loader runs: the
loader's own process (all its threads: a pin thread, torchdata's mapper threads) and its
worker processes (every live descendant), over a window of the epoch that starts after its
first batches and ends before its shutdown, so neither start-up (imports, forks, a worker's
first touch of its pages) nor shutdown is counted. CPU time, not wall time: on a shared
machine a batch's wall time follows the neighbours, its CPU much less.

The workers are read live through ``/proc`` (psutil) at both ends of the window: a worker that
starts inside the window counts from its start, one that ends inside it is lost and flagged
(``workers_lost``), never silently counted as zero.
"""

from __future__ import annotations

import contextlib
import time

import psutil


def _cpu_s(process: psutil.Process) -> float | None:
    """User + system CPU seconds of ``process`` (its threads too); None when it is gone."""
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


class CpuWindow:
    """CPU seconds of this process and of its live descendants between ``start()`` and
    ``stop()``. Costs a read of ``/proc`` per worker at each end, none in between."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        self._main = 0.0
        self._kids: dict[int, tuple[psutil.Process, float]] = {}

    def _children(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return self._me.children(recursive=True)
        return []

    def start(self) -> None:
        """The window opens: the loader's process and every live worker are read now."""
        self._kids = {}
        for kid in self._children():
            cpu = _cpu_s(kid)
            if cpu is not None:
                self._kids[kid.pid] = (kid, cpu)
        self._main = time.process_time()

    def stop(self) -> dict[str, float | int]:
        """The window closes: ``main_s`` and ``workers_s`` (CPU seconds inside it),
        ``workers`` (how many were read), ``workers_lost`` (ended inside the window)."""
        main_s = time.process_time() - self._main
        workers_s, lost, seen = 0.0, 0, set()
        for pid, (kid, cpu_before) in self._kids.items():
            cpu = _cpu_s(kid)
            seen.add(pid)
            if cpu is None:
                lost += 1
            else:
                workers_s += cpu - cpu_before
        for kid in self._children():  # started inside the window: all of its CPU is inside
            if kid.pid not in seen:
                cpu = _cpu_s(kid)
                if cpu is not None:
                    workers_s += cpu
                    seen.add(kid.pid)
        return {
            "main_s": main_s,
            "workers_s": workers_s,
            "workers": len(seen),
            "workers_lost": lost,
        }
