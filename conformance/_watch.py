"""Inside a scenario's child: what the loader started, and what it left behind.

A snapshot is taken before the loader exists; ``leaks()`` is called after the scenario dropped
every reference to it and waits (bounded) for workers and threads to finish exiting. The
multiprocessing helpers that outlive any loader by design (the resource tracker, the forkserver)
are not the loader's workers and are not counted.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field

import psutil

# Helpers multiprocessing keeps for the whole process lifetime (spawn / forkserver contexts).
_MP_HELPERS = re.compile(r"multiprocessing\.(resource_tracker|forkserver)|semaphore_tracker")


def is_helper(proc: psutil.Process) -> bool:
    try:
        return bool(_MP_HELPERS.search(" ".join(proc.cmdline())))
    except psutil.Error:
        return False


def workers(pid: int | None = None) -> list[psutil.Process]:
    """Live descendants of ``pid`` (default: this process), multiprocessing helpers excepted."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in kids if not is_helper(p)]


def _fds() -> set[str]:
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            continue
    return names


def _shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


@dataclass
class Leaks:
    """Everything found left over after the loader was dropped."""

    processes: list[str] = field(default_factory=list)
    zombies: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    fds: list[str] = field(default_factory=list)
    shm: list[str] = field(default_factory=list)
    gone_after_s: float = 0.0  # how long the workers took to be gone after the drop

    def any(self) -> bool:
        return bool(self.processes or self.zombies or self.threads or self.fds or self.shm)

    def describe(self) -> str:
        parts = []
        for name in ("processes", "zombies", "threads", "fds", "shm"):
            items = getattr(self, name)
            if items:
                parts.append(f"{name}: {', '.join(items[:5])}{' …' if len(items) > 5 else ''}")
        return "; ".join(parts) or "nothing"


class Watch:
    """Baseline of processes, threads, fds and /dev/shm, taken when constructed."""

    def __init__(self) -> None:
        self.threads = set(threading.enumerate())
        self.fds = _fds()
        self.shm = _shm()
        self.seen_pids: set[int] = set()

    def note_workers(self) -> list[int]:
        """Remember (and return) the pids of the loader's live workers right now."""
        pids = [p.pid for p in workers()]
        self.seen_pids.update(pids)
        return pids

    def leaks(self, grace_s: float) -> Leaks:
        """Wait up to ``grace_s`` for workers and threads to go, then list what remains."""
        start = time.monotonic()
        deadline = start + grace_s
        self.note_workers()
        out = Leaks()
        live = []
        # A zombie is a worker that exited but was never joined; psutil's wait would reap it and
        # hide that, so zombies are listed (not waited for) first.
        for proc in workers():
            try:
                zombie = proc.status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                continue
            (out.zombies.append(str(proc.pid)) if zombie else live.append(proc))
        _, alive = psutil.wait_procs(live, timeout=grace_s)
        for thread in set(threading.enumerate()) - self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        out.gone_after_s = time.monotonic() - start
        out.processes = [str(proc.pid) for proc in alive]
        out.threads = [t.name for t in set(threading.enumerate()) - self.threads if t.is_alive()]
        out.fds = sorted(_fds() - self.fds)
        # Only entries that name one of our pids are ours: other programs use /dev/shm too.
        pids = {str(os.getpid()), *(str(p) for p in self.seen_pids)}
        out.shm = sorted(
            name
            for name in _shm() - self.shm
            if any(re.search(rf"(^|\D){p}(\D|$)", name) for p in pids)
        )
        return out

    def kill_leftovers(self) -> None:
        """Kill, by pid, every worker still alive (the case has already recorded the leak)."""
        for proc in workers():
            try:
                proc.kill()
            except psutil.Error:
                continue
