"""Run one scenario in a forked child under a deadline, then reap what it left, by PID.

Why fork and not spawn: the loader under test is already imported in the pytest process, so a
forked child starts in milliseconds (a spawned one would import torch again, seconds per case on
two cores). The child calls ``os.setsid()`` first, so every process it or its workers start stays
in a session whose id is the child's pid; after the child is gone, anything still in that session
is an orphan the scenario leaked. Those are killed one by one, by pid; nothing is killed by name.

The child talks to the parent over one pipe of pickled ``(tag, payload)`` messages: ``"note"``
messages (e.g. the worker pids, sent before a parent-death scenario SIGKILLs the child itself)
and one final ``"returned"`` or ``"raised"``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

_HEADER = struct.Struct("!I")
# After the child exited: how long what is left of its session may take to finish exiting before
# it counts as a leftover (the leak check inside the child already waited for the workers).
ORPHAN_GRACE_S = 1.0

# The write end of the pipe to the parent, set in the child only (send_note uses it).
_note_fd: int | None = None


@dataclass
class Outcome:
    """What became of one bounded scenario."""

    status: str  # "returned" | "raised" | "deadline" | "killed" (died without a final message)
    value: Any = None  # the target's return value when status == "returned"
    error: str | None = None  # the traceback text when status == "raised"
    elapsed_s: float = 0.0
    notes: list[Any] = field(default_factory=list)  # payloads of send_note(), in order
    orphans: list[str] = field(default_factory=list)  # "pid name" of session members left over
    killed_signal: int | None = None  # the signal that ended the child, if one did
    exit_code: int | None = None  # the child's exit status, if it exited (70: report not sent)
    after_exit: Any = None  # what the after_exit callback returned


def send_note(payload: Any) -> None:
    """From inside the child: send the parent an intermediate message (flushed at once)."""
    if _note_fd is None:
        raise RuntimeError("send_note() is only available inside a sandboxed scenario")
    _write_msg(_note_fd, ("note", payload))


def kill_self() -> None:
    """From inside the child: die by SIGKILL (the loader's process, killed by the OOM killer)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _write_msg(fd: int, msg: tuple[str, Any]) -> None:
    data = pickle.dumps(msg)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def session_members(sid: int) -> list[psutil.Process]:
    """Every live process whose session id is ``sid`` (the sandbox child's pid)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != sid and os.getsid(proc.pid) == sid:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} ({proc.name()}, {proc.status()})"
    except psutil.Error:
        return f"{proc.pid} (gone)"


def reap_session(sid: int, grace_s: float) -> list[str]:
    """Kill (SIGKILL, by pid) what is left of session ``sid`` and describe it.

    Processes already exiting get ``grace_s`` first; the description lists every one found.
    """
    from conformance._watch import is_helper

    members = session_members(sid)
    if not members:
        return []
    # multiprocessing's resource tracker and forkserver outlive the child by design; they are
    # killed like the rest but not reported as the loader's leftovers. Neither are zombies: once
    # the child is gone, a zombie's parent is another member (a helper, or a leftover that is
    # reported itself) that has not reaped it yet. Helpers are told apart by their command line
    # now, while it can still be read (a process in the middle of exiting has an empty one and
    # still reads as running); only what is still alive after the grace period is reported.
    helpers = {p.pid for p in members if is_helper(p)}
    _, alive = psutil.wait_procs(members, timeout=grace_s)
    described = [_describe(p) for p in alive if p.pid not in helpers and not _zombie(p)]
    for proc in alive:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=5.0)
    return described


def run_bounded(
    target: Callable[..., Any],
    *args: Any,
    deadline_s: float,
    after_exit: Callable[[Outcome], Any] | None = None,
    **kwargs: Any,
) -> Outcome:
    """Run ``target(*args, **kwargs)`` in a forked child in its own session, for at most
    ``deadline_s`` seconds; then kill the child if needed and reap its session.

    ``after_exit(outcome)`` runs once the child is gone and before its session is reaped (a
    parent-death case watches the orphans there); its return value lands in
    ``outcome.after_exit``.

    Returns:
        The Outcome; never raises for anything the target or the loader does.
    """
    global _note_fd
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # --- child ---
        os.close(read_fd)
        code = 0
        try:
            os.setsid()
            _note_fd = write_fd
            try:
                try:
                    value = target(*args, **kwargs)
                finally:
                    # The scenario is over: a loader's SIGCHLD handler (torch raises its
                    # worker-death error from one, wherever the main thread is) must not
                    # interrupt the report of what happened.
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                msg: tuple[str, Any] = ("returned", value)
            except BaseException:
                msg = ("raised", traceback.format_exc())
            _write_msg(write_fd, msg)
        except BaseException:
            code = 70
        finally:
            # _exit: no pytest atexit hooks, no flushing of the parent's buffers twice.
            os._exit(code)
    # --- parent ---
    os.close(write_fd)
    # The loader's workers inherit the pipe's write end through fork, so EOF only comes when
    # they are gone too; the child's own exit is watched through a pidfd instead.
    child_fd = os.pidfd_open(pid)
    os.set_blocking(read_fd, False)
    outcome = Outcome(status="killed")
    deadline = start + deadline_s
    buf = b""
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_fd, child_fd], [], [], left)
            if not ready:
                timed_out = True
                break
            buf, eof = _read_available(read_fd, buf, outcome)
            if eof or child_fd in ready:
                break
    finally:
        os.close(read_fd)
        os.close(child_fd)
    outcome.elapsed_s = time.monotonic() - start
    if timed_out:
        outcome.status = "deadline"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)  # bounded: the child has exited or was just SIGKILLed
    if os.WIFSIGNALED(status):
        outcome.killed_signal = os.WTERMSIG(status)
    elif os.WIFEXITED(status):
        outcome.exit_code = os.WEXITSTATUS(status)
    if after_exit is not None:
        outcome.after_exit = after_exit(outcome)
    outcome.orphans = reap_session(pid, grace_s=0.0 if timed_out else ORPHAN_GRACE_S)
    return outcome


def _read_available(fd: int, buf: bytes, outcome: Outcome) -> tuple[bytes, bool]:
    """Read what the pipe holds now (non-blocking); returns the undecoded rest and EOF."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return buf, False
        if not chunk:
            return buf, True
        buf = _consume(buf + chunk, outcome)


def _consume(buf: bytes, outcome: Outcome) -> bytes:
    """Decode the complete messages at the front of ``buf`` into ``outcome``."""
    while len(buf) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buf)
        if len(buf) < _HEADER.size + size:
            break
        tag, payload = pickle.loads(buf[_HEADER.size : _HEADER.size + size])
        buf = buf[_HEADER.size + size :]
        if tag == "note":
            outcome.notes.append(payload)
        elif tag == "returned":
            outcome.status, outcome.value = "returned", payload
        else:
            outcome.status, outcome.error = "raised", payload
    return buf


def wait_pids_gone(pids: list[int], timeout_s: float) -> dict[int, float | None]:
    """Seconds until each pid exited (None: still alive after ``timeout_s``).

    Uses pidfds where Linux has them (woken by the exit itself, no polling), else psutil.
    """
    start = time.monotonic()
    gone: dict[int, float | None] = {}
    fds: dict[int, int] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except (ProcessLookupError, OSError, AttributeError):
            gone[pid] = 0.0  # already gone (or no pidfds: handled below)
    try:
        while fds:
            left = start + timeout_s - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(fds), [], [], left)
            now = time.monotonic() - start
            for fd in ready:
                gone[fds.pop(fd)] = now
                os.close(fd)
    finally:
        for fd, pid in fds.items():
            os.close(fd)
            gone[pid] = None
    return gone
