"""Outside faults by PID: find a loader's workers as psutil descendants, signal them, wait.

Workers are found as descendants of the process that owns the loader, never through a loader's
private attributes and never by name, so this works for any loader. Every wait is bounded; a
pidfd (Linux >= 5.3) wakes the waiter at the exit itself, with a short poll as the fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import select
import signal as _signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil

from loaderspec import tracewriter
from loaderspec.vocabulary import Action

__all__ = [
    "SigchldHold",
    "blocked_in_pipe_write",
    "children",
    "descendant_pids",
    "is_gone",
    "is_mp_helper",
    "kill",
    "new_children",
    "reap",
    "sigchld_deferred",
    "subreaper",
    "wait_blocked",
    "wait_gone",
    "zombies",
]

_POLL_S = 0.005
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Be a child subreaper for the block (Linux; `prctl(PR_SET_CHILD_SUBREAPER)`): orphans of
    this process's descendants are re-parented here instead of to init. Yields whether it is
    on; the previous setting comes back after the block."""
    libc = _libc() if sys.platform.startswith("linux") else None
    if libc is None:
        yield False
        return
    was = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0)
    on = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield on
    finally:
        if on and not was.value:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def descendant_pids(pid: int) -> list[int]:
    """Pids of `pid`'s descendants, cheaply: Linux's /proc/<pid>/task/<tid>/children files cost
    O(descendants), where psutil scans every process (~10 ms for 100). Falls back to psutil."""
    if not Path(f"/proc/{pid}/task").exists() or not _HAS_CHILDREN_FILE:
        return [p.pid for p in _descendants(pid)]
    out: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                out.append(kid)
                stack.append(kid)
    return out


_HAS_CHILDREN_FILE = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists()


def _descendants(pid: int | None) -> list[psutil.Process]:
    try:
        return psutil.Process(os.getpid() if pid is None else pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.NoSuchProcess:
        return None


def children(pid: int | None = None, *, helpers: bool = True) -> list[psutil.Process]:
    """Alive (not zombie) descendants of `pid` (default: this process), in pid order;
    multiprocessing's own helpers (`is_mp_helper`) only with `helpers`."""
    alive = [p for p in _descendants(pid) if _status(p) not in (None, psutil.STATUS_ZOMBIE)]
    if not helpers:
        alive = [p for p in alive if not is_mp_helper(p)]
    return sorted(alive, key=lambda p: p.pid)


def reap(pid: int) -> bool:
    """`waitpid(pid, WNOHANG)`: True if `pid` was this process's child and is reaped now (False:
    not ours, or still running)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


def new_children(before: set[int], pid: int | None = None, *, exited: bool = False) -> list[int]:
    """Pids of alive descendants of `pid` that are not in `before` (a set taken earlier).

    With `exited=True` also those that already exited and are not reaped: right after
    `iter(loader)` a worker with an early fault may be dead before anyone looks.
    """
    if exited:
        mine = descendant_pids(os.getpid() if pid is None else pid)
        return sorted(set(mine) - before)
    return sorted(p.pid for p in children(pid) if p.pid not in before)


def zombies(pid: int | None = None) -> list[int]:
    """Pids of descendants of `pid` (default: this process) that exited and were not reaped."""
    return sorted(p.pid for p in _descendants(pid) if _status(p) == psutil.STATUS_ZOMBIE)


def kill(
    pids: Iterable[int],
    sig: int = _signal.SIGKILL,
    *,
    action: Action | None = Action.FAULT_KILL_WORKER,
    worker: int | None = None,
) -> list[int]:
    """Send `sig` to each pid; return those it reached (a gone pid is skipped, not an error).

    With tracing on, logs `action` (None: log nothing) just after each signal that reached its
    pid; `worker` is the loader's worker id when the caller knows it. After, not before: a
    worker that put its batch between the record and the signal would show in the trace as a
    killed worker putting (NOT-A-BEHAVIOUR); and the caller, the only one that records in this
    thread, notes nothing of the death before this record.
    """
    sent = []
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        if action is not None:
            tracewriter.emit_fault(action, worker=worker, victim=pid)
        sent.append(pid)
    return sent


def kill_tree(pid: int, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL `pid` and its descendants, each by pid (descendants first, so none is re-parented
    unseen), and wait up to `timeout_s`; return the pids still alive."""
    pids = [*descendant_pids(pid), pid]
    kill(pids, _signal.SIGKILL, action=None)
    return wait_gone(pids, timeout_s)


def is_gone(pid: int) -> bool:
    """True if `pid` exited (a zombie counts as exited: it runs no code)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait up to `timeout_s` for every pid to exit; return those still alive, in pid order.

    Exited-but-unreaped (zombie) counts as gone; `zombies()` tells whether the parent reaped.
    Does not reap: a child of this process stays a zombie until someone waits for it.
    """
    deadline = time.monotonic() + timeout_s
    waiting = {pid: _pidfd(pid) for pid in pids}
    try:
        while True:
            for pid in [p for p in waiting if is_gone(p)]:
                fd = waiting.pop(pid)
                if fd is not None:
                    os.close(fd)
            left = deadline - time.monotonic()
            if not waiting or left <= 0:
                return sorted(waiting)
            fds = [fd for fd in waiting.values() if fd is not None]
            if len(fds) == len(waiting):
                # Every pid has a pidfd: sleep until one becomes readable (= that process exited).
                select.select(fds, [], [], left)
            else:
                select.select(fds, [], [], min(left, _POLL_S))
    finally:
        for fd in waiting.values():
            if fd is not None:
                os.close(fd)


# Where a thread sleeps while it writes to a full pipe: 'pipe_write' (Linux <= 6.x),
# 'anon_pipe_write' (6.16+), 'pipe_wait' (< 5.5).
_PIPE_WRITE_WCHANS = ("pipe_write", "pipe_wait")


def blocked_in_pipe_write(pid: int, *, except_tid: int | None = None) -> bool:
    """True if a thread of `pid` (other than `except_tid`) sleeps in a pipe write (Linux
    `wchan`), e.g. a worker whose result does not fit the pipe while nobody reads. False where
    `/proc` does not say."""
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            if except_tid is not None and task.name == str(except_tid):
                continue
            with contextlib.suppress(OSError):
                wchan = (task / "wchan").read_text()
                if any(w in wchan for w in _PIPE_WRITE_WCHANS):
                    return True
    return False


def is_mp_helper(proc: psutil.Process | int) -> bool:
    """True for multiprocessing's own long-lived helpers (the resource tracker that spawn and
    forkserver start, the fork server): they outlive any loader by design and exit when their
    parent's pipe closes, so they are nobody's worker and no loader's leak. Told apart by command
    line (read it while the process runs: an exiting one has an empty one)."""
    try:
        p = proc if isinstance(proc, psutil.Process) else psutil.Process(proc)
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return False
    return is_mp_helper_command(cmd)


# The code multiprocessing starts its helpers with (`python -c "from multiprocessing.X import
# main; main(...)"`). Only that statement counts: a forked worker carries its parent's command
# line, and a pytest run given a case id such as `...[forkserver]` would otherwise make every
# worker of the run a "helper" (nobody's worker, never killed, never a leak).
_MP_HELPERS = "resource_tracker|forkserver|semaphore_tracker"
_MP_HELPER = re.compile(rf"from multiprocessing\.({_MP_HELPERS}) import")


def is_mp_helper_command(cmd: str) -> bool:
    """True for the command line of one of multiprocessing's helpers (`is_mp_helper`)."""
    return _MP_HELPER.search(cmd) is not None


def wait_blocked(pid: int, timeout_s: float) -> bool:
    """Wait up to `timeout_s` until `pid` is blocked in a pipe write; False if it never was
    (or exited). Polls /proc: the kernel offers no event for "blocked"."""
    deadline = time.monotonic() + timeout_s
    while not blocked_in_pipe_write(pid):
        if time.monotonic() >= deadline or is_gone(pid):
            return False
        time.sleep(_POLL_S)
    return True


class SigchldHold:
    """`sigchld_deferred()`'s context manager; `released()` lifts the hold inside it."""

    def __init__(self) -> None:
        self._pending: list[int] = []
        self._held = False
        self._original: Any = None
        self._swapped = False
        self._old_mask: set[int] = set()

    def _note(self, signum: int, frame: object) -> None:
        self._pending.append(signum)

    def _hold(self) -> None:
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        self._original = _signal.getsignal(_signal.SIGCHLD)
        self._swapped = callable(self._original)
        self._old_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
        if self._swapped:
            _signal.signal(_signal.SIGCHLD, self._note)
        self._held = True

    def _release(self) -> None:
        if not self._held:
            return
        self._held = False
        if self._swapped and _signal.getsignal(_signal.SIGCHLD) == self._note:
            _signal.signal(_signal.SIGCHLD, self._original)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, self._old_mask)
        if self._pending:
            self._pending.clear()
            _signal.raise_signal(_signal.SIGCHLD)

    def __enter__(self) -> SigchldHold:
        self._hold()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        """Let SIGCHLD (and the handler's exceptions) through for the inner block: the one
        place the scenario catches a loader's errors, i.e. its loop over the iterator."""
        try:
            self._release()
            yield
        finally:
            self._hold()


def sigchld_deferred() -> SigchldHold:
    """Hold SIGCHLD back for the block (and deliver it right after), except inside
    `.released()`.

    torch's loader (so torchdata's too) installs a SIGCHLD handler that raises
    `RuntimeError("DataLoader worker (pid N) is killed by signal ...")` in the main thread at
    whatever bytecode it runs when a worker has died: inside a psutil scan, an `except`
    clause, the harness's bookkeeping before or after the loop (a worker that dies while the
    iterator is being created, or a second SIGCHLD while the dead worker is unreaped). A
    scenario that kills workers holds SIGCHLD for its bookkeeping and lets it through only
    where it catches the loader's errors:

        with processes.sigchld_deferred() as held:
            it = iter(loader)
            workers = processes.new_children(before, exited=True)
            try:
                with held.released():
                    for batch in it: ...  # a death raises here, as in the user's loop
            except Exception as exc:
                error = summarize(exc)
            del it

    How: the main thread blocks SIGCHLD (threads it starts meanwhile, such as torch's queue
    feeders and pin thread, inherit the mask, so the kernel cannot hand the signal to them), and
    a Python handler already installed is swapped for one that only notes the signal. On
    release the handler is restored (unless the block installed another, as torch does at its
    first multi-worker iterator; that one stays) and the mask lifted: a SIGCHLD that came
    meanwhile is delivered then. Threads started before the hold that leave SIGCHLD unblocked
    can still take the signal and make Python run the handler early. Main thread only;
    elsewhere it does nothing.
    """
    return SigchldHold()
