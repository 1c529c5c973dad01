"""Firing faults inside whatever process runs the dataset (a loader's worker, or the main process).

Owns the side effects of `faultinject.faults`: signals to self, sleeps, raises, once-only markers,
fault records and `Fault*` trace records. Knows torch only through the public
`torch.utils.data.get_worker_info()`, which torch's, the reference's and torchdata's workers set
(the paddle adapter sets it too), so it works inside any of those loaders' workers. It is looked
up at every call, not bound at import: a thread-based loader on a torch without thread-local
worker info (2.13) installs its own `get_worker_info` there, as torch's main branch answers per
thread.

A `Die` never fires in the process that built the dataset (the loader's own process, where a
thread-based loader's workers run): killing it would kill the loader and the scenario with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch.utils.data
from loaderspec.faultinject import processes
from loaderspec.faultinject.faults import (
    Die,
    Fault,
    Hang,
    Raise,
    RaiseUnrebuildable,
    UnrebuildableError,
)
from loaderspec.faultinject.records import Fetch, write_fetch

from loaderspec import tracewriter
from loaderspec.vocabulary import Action

__all__ = [
    "arm_collate",
    "claim_once",
    "fire_die",
    "fire_hang",
    "fire_raise",
    "in_worker",
    "ordinal",
    "worker_id",
    "worker_info",
]

# Indices whose batch must die in collate, armed by the dataset in this process (the worker that
# fetched the item is the one that collates its batch).
_ARMED: set[int] = set()

# How often the blocked_put watcher looks at /proc; it stops after Die.blocked_wait_s.
_WCHAN_POLL_S = 0.01


def worker_info() -> Any:
    """`torch.utils.data.get_worker_info()`, looked up now (a thread loader may replace it)."""
    return torch.utils.data.get_worker_info()


def worker_id() -> int | None:
    """The loader worker id of this process or thread, or None outside a worker."""
    info = worker_info()
    return None if info is None else int(info.id)


def claim_once(state_dir: str | None, fault: Fault, key: int | None = None) -> bool:
    """True if `fault` should fire now: always for a repeatable fault, and for a `once` fault only
    for the first process to create its marker file (`O_EXCL` is atomic across processes)."""
    if not fault.once:
        return True
    if state_dir is None:
        raise ValueError(f"{fault!r} is once-only but the dataset has no state dir")
    digest = hashlib.sha1(f"{fault!r}|{key}".encode()).hexdigest()[:20]
    try:
        fd = os.open(Path(state_dir) / f"once-{digest}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def record_fault(record_dir: str | None, fault_name: str, index: int, k: int | None) -> None:
    """Write the `event == "fault"` record, just before the fault fires."""
    if record_dir is not None:
        now, wid, tid = time.monotonic(), worker_id(), threading.get_native_id()
        fetch = Fetch(now, os.getpid(), wid, index, -1, "fault", fault_name, k, tid)
        write_fetch(record_dir, fetch)


def in_worker(home_pid: int | None = None, home_tid: int | None = None) -> bool:
    """Whether this call runs in one of the loader's workers: torch's worker info says so, or,
    for loaders whose workers set none (SPDL's, grain's, torchdata.nodes'), it runs in another
    process than the one that built the dataset (`home_pid`), or in another thread of it than
    the one that built it (`home_tid`, a `threading.get_ident()`)."""
    if worker_id() is not None:
        return True
    if home_pid is None:
        return False
    if os.getpid() != home_pid:
        return True
    return home_tid is not None and threading.get_ident() != home_tid


# This process's or thread's claimed ordinal, for workers without worker info (`ordinal`).
_ORDINALS: dict[tuple[int, int], int] = {}


def ordinal(directory: str | None) -> int | None:
    """A worker id for a worker that has no worker info (SPDL's, grain's, torchdata.nodes'): the
    n-th process or thread to ask, claimed once with an `O_EXCL` marker in `directory` (shared by
    every worker of the run); None without a directory."""
    if directory is None:
        return None
    key = (os.getpid(), threading.get_native_id())
    if key not in _ORDINALS:
        n = 0
        while True:
            try:
                os.close(os.open(Path(directory) / f"ordinal-{n}", os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                n += 1
        _ORDINALS[key] = n
    return _ORDINALS[key]


def may_fire_here(
    fault: Die | Hang, home_pid: int | None = None, home_tid: int | None = None
) -> bool:
    """Die and Hang stay out of the main process unless asked: they would kill or hang the test.
    A Die also stays out of `home_pid` (the process that built the dataset: a thread worker
    there shares the loader's process). See `in_worker` for `home_pid` and `home_tid`."""
    if fault.anywhere:
        return True
    if not in_worker(home_pid, home_tid):
        return False
    return not (isinstance(fault, Die) and os.getpid() == home_pid)


def fire_die(fault: Die) -> None:
    """Send `fault.signal` to this process (a handled signal returns, as it would in real life)."""
    assert fault.signal is not None  # Die.__post_init__ allows None only for blocked_put
    tracewriter.emit_fault(Action.FAULT_KILL_WORKER, worker=worker_id())
    os.kill(os.getpid(), fault.signal)


def fire_hang(fault: Hang) -> None:
    """Block for `fault.seconds`, looking at nothing (like a stuck read)."""
    tracewriter.emit_fault(Action.FAULT_HANG_WORKER, worker=worker_id())
    deadline = time.monotonic() + fault.seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)


def fire_raise(fault: Raise | RaiseUnrebuildable) -> None:
    """Raise the fault's exception."""
    tracewriter.emit_fault(Action.FAULT_FETCH_ERROR, worker=worker_id())
    if isinstance(fault, RaiseUnrebuildable):
        raise UnrebuildableError(f"unrebuildable fault at item {fault.at}", "two-argument __init__")
    raise fault.exc_type(fault.text())


def arm_collate(index: int) -> None:
    """Make `faultinject.collate` kill this process when it collates the batch holding `index`."""
    _ARMED.add(index)


def take_armed(values: list[object], at: int) -> bool:
    """True (once) if the batch being collated holds the armed item `at`: armed by the dataset in
    this process, or, for a dataset that did not arm it, an int item equal to `at`."""
    if at in _ARMED:
        _ARMED.discard(at)
        return True
    return any(type(v) is int and v == at for v in values)


# Where a worker's loop sleeps while it waits for its next index: a poll or select on its
# index queue (torch, torchdata, paddle) or a blocking pipe read (the reference loader).
_IDLE_WCHANS = (
    "poll_schedule_timeout",
    "do_sys_poll",
    "do_select",
    "core_sys_select",
    "ep_poll",
    "pipe_read",
    "pipe_wait",
)


def _thread_idle(tid: int) -> bool:
    """True if thread `tid` of this process sleeps waiting for input (see `_IDLE_WCHANS`)."""
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] != "S":
            return False
        wchan = Path(f"/proc/self/task/{tid}/wchan").read_text()
        return any(w in wchan for w in _IDLE_WCHANS)
    return False


def die_when_idle(fault: Die, record_dir: str | None, index: int, k: int | None) -> None:
    """Start a daemon thread that sends `fault.signal` to this process once the calling thread
    (the one fetching item `index`) sleeps waiting for work, or after `fault.blocked_wait_s`
    anyway; the fault record says which (`Die:idle` or `Die:idle:busy`)."""
    fetcher = threading.get_native_id()

    def watch() -> None:
        deadline = time.monotonic() + fault.blocked_wait_s
        idle = _thread_idle(fetcher)
        while not idle and time.monotonic() < deadline:
            time.sleep(_WCHAN_POLL_S)
            idle = _thread_idle(fetcher)
        record_fault(record_dir, "Die:idle" if idle else "Die:idle:busy", index, k)
        fire_die(fault)

    threading.Thread(target=watch, name="faultinject-idle", daemon=True).start()


def die_when_blocked(fault: Die, record_dir: str | None, index: int, k: int | None) -> None:
    """Start a daemon thread that sends `fault.signal` to this process once one of its threads is
    blocked writing to a pipe (the oversized result), or after `fault.blocked_wait_s` anyway; the
    fault record says which (`Die:blocked_put` or `Die:blocked_put:unblocked`)."""

    def watch() -> None:
        me = threading.get_native_id()
        deadline = time.monotonic() + fault.blocked_wait_s
        blocked = processes.blocked_in_pipe_write(os.getpid(), except_tid=me)
        while not blocked and time.monotonic() < deadline:
            time.sleep(_WCHAN_POLL_S)
            blocked = processes.blocked_in_pipe_write(os.getpid(), except_tid=me)
        name = "Die:blocked_put" if blocked else "Die:blocked_put:unblocked"
        record_fault(record_dir, name, index, k)
        fire_die(fault)

    threading.Thread(target=watch, name="faultinject-blocked-put", daemon=True).start()
