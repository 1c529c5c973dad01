"""Processes the benchmark owns: scenario children, their workers, and waiting for exits.

Owns starting a scenario child (``python -m bench.scenarios SPEC``), reading its JSON events
with a deadline, killing it and everything it started *by PID*, and timing process exits. Never
signals anything by name. Exits are awaited with ``pidfd`` + ``poll`` (the kernel wakes us at
the exit, no sleep-and-look loop); where ``pidfd_open`` is missing, ``psutil.wait_procs``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux), so their exits are ours.

    A worker orphaned by its parent's SIGKILL is re-parented here instead of to init; we reap
    it, so it never lingers as a zombie nobody waits for. Returns whether it worked.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our (possibly adopted) child; else nothing."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _gone(proc: psutil.Process) -> bool:
    """Whether ``proc`` has exited (a zombie has exited; only its status is left)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: list[psutil.Process], timeout_s: float) -> dict[int, float | None]:
    """Wait until every process has exited or ``timeout_s`` passes; reap adopted ones.

    Returns, per PID, seconds from the call to its exit (0.0 if already gone), or None for
    those still running at the deadline.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    exits: dict[int, float | None] = {p.pid: None for p in procs}
    pending: dict[int, psutil.Process] = {}
    fds: dict[int, int] = {}
    for p in procs:
        if _gone(p):
            exits[p.pid] = 0.0
            _reap(p.pid)
            continue
        with contextlib.suppress(AttributeError, OSError):  # old kernel or Python: psutil below
            fds[os.pidfd_open(p.pid)] = p.pid
        pending[p.pid] = p
    try:
        if len(fds) == len(pending):
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            while fds and (left := deadline - time.monotonic()) > 0:
                for fd, _ in poller.poll(max(1, int(left * 1000))):
                    pid = fds.pop(fd)
                    poller.unregister(fd)
                    os.close(fd)
                    exits[pid] = time.monotonic() - start
                    _reap(pid)
        else:  # no pidfd: psutil polls for us
            done, _alive = psutil.wait_procs(list(pending.values()), timeout=timeout_s)
            for p in done:
                exits[p.pid] = time.monotonic() - start
                _reap(p.pid)
    finally:
        for fd in fds:
            os.close(fd)
    return exits


def kill_all(procs: list[psutil.Process]) -> None:
    """SIGKILL each still-running process by PID (psutil checks it is the same process)."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if not _gone(p):
                p.kill()
    wait_gone(procs, 5.0)


def processes(pids: list[int]) -> list[psutil.Process]:
    """psutil handles for ``pids`` (taken now, so a later reuse of a PID is not mistaken)."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


class Child:
    """A scenario child process: JSON events on its stdout, stderr kept in a file."""

    def __init__(self, spec: dict[str, Any]) -> None:
        # Lives as long as the Child; closed in __exit__.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.scenarios", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=ROOT,
            env=env,
        )
        self.proc = psutil.Process(self.popen.pid)
        self._buffer = b""
        self._known: list[psutil.Process] = [self.proc]

    def event(self, timeout_s: float) -> dict[str, Any] | None:
        """The next JSON event, or None at the deadline or when the child closed stdout."""
        deadline = time.monotonic() + timeout_s
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"event": "error", "error": f"unparsable event line: {line[:200]!r}"}

    def descendants(self) -> list[psutil.Process]:
        """Everything the child started and that is still its descendant, remembered for kill."""
        with contextlib.suppress(psutil.Error):
            for p in self.proc.children(recursive=True):
                if p.pid not in {k.pid for k in self._known}:
                    self._known.append(p)
        return self._known[1:]

    def remember(self, procs: list[psutil.Process]) -> None:
        """Processes to kill at cleanup even if they are no longer the child's descendants."""
        self._known.extend(p for p in procs if p.pid not in {k.pid for k in self._known})

    def sigkill(self) -> None:
        """SIGKILL the child alone (its workers are left to fend for themselves)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill the child and everything it started, by PID; reap; close files."""
        self.descendants()
        kill_all(list(reversed(self._known)))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        for stream in (self.popen.stdin, self.popen.stdout):
            if stream is not None:
                stream.close()

    def stderr_tail(self, limit: int = 400) -> str:
        """The end of the child's stderr, for a reason shown in the report."""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return text[-limit:]

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._stderr.close()
