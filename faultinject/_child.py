"""The sandbox's child side: run the target, measure what it leaked, talk to the harness.

Runs in the sandbox child (forked from the harness, or a fresh interpreter started with `python -c
"from loaderspec.faultinject._child import spawn_main; spawn_main()"`), after it became the leader
of its own session. It sends the harness: `("started", t)` when the target is about to run,
`("note", t, payload)` for each `note()` the target makes, `("returned", t)` when the target has
returned or raised (what follows is measuring, which the run's deadline does not bound),
`("kill_self", t, pids)` before a parent-death scenario SIGKILLs it, and `("result", ...)` with the
outcome and the leaks measured here (fds, threads and unreaped children: only the process itself can
see those).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

from loaderspec.faultinject import _wire, processes

from loaderspec import tracewriter
from loaderspec.vocabulary import Action

__all__ = ["PID_RECORD", "in_sandbox", "kill_self", "mark_baseline", "note", "set_linger"]

# What each process forked in the child writes to the harness's fork pipe: its pid.
PID_RECORD = struct.Struct("<i")

# Set in the sandbox child only: (message fd to the harness, ack fd from the harness).
_channel: tuple[int, int] | None = None

# How long kill_self waits for the harness to acknowledge the pids it will watch.
_ACK_TIMEOUT_S = 10.0


def in_sandbox() -> bool:
    """True inside a `faultinject.sandbox.run` child."""
    return _channel is not None and os.getpid() == _child_pid


_child_pid = -1
# What the target's set-up opened and started (fds, threads): not counted as leaks.
_baseline: tuple[dict[int, str], dict[int, str]] = ({}, {})
# The target's own choice of linger_s (None: the job's).
_linger: float | None = None


def note(payload: Any) -> None:
    """From inside the target: send the harness `payload` at once (it lands in the report's
    `notes`, in order), so a scenario that later hangs or dies still leaves its record.

    Raises:
        RuntimeError: not called in a sandbox child.
    """
    if not in_sandbox() or _channel is None:
        raise RuntimeError("faultinject.sandbox.note() only works inside sandbox.run's child")
    _wire.send(_channel[0], ("note", time.monotonic(), payload))


def mark_baseline() -> None:
    """From inside the target: what is open and running now (files, pipes, threads, e.g. the
    resource tracker a spawn context starts) is the scenario's own set-up, not the loader's:
    leaks are measured against this moment instead of the target's start."""
    global _baseline
    _baseline = (_fds(), threads_now())


def set_linger(seconds: float) -> None:
    """From inside the target: give what it leaves `seconds` (at most the run's `linger_s`, which
    bounds the harness's wait) to go away once it returns (a target that learns only while it
    runs how long to wait)."""
    global _linger
    _linger = seconds


def kill_self() -> None:
    """SIGKILL the sandbox child (a parent-death scenario), after telling the harness which
    descendants to time; the harness then reports how long each outlived it (`orphan_exit_s`).

    Raises:
        RuntimeError: not called in a sandbox child (nothing is killed).
    """
    if not in_sandbox() or _channel is None:
        raise RuntimeError("faultinject.sandbox.kill_self() only works inside sandbox.run's child")
    out_fd, ack_fd = _channel
    pids = [p.pid for p in processes.children()]
    _wire.send(out_fd, ("kill_self", time.monotonic(), pids))
    # The harness opens a pidfd per pid before acking, so no exit goes unseen; bounded wait.
    with contextlib.suppress(OSError):
        import select

        select.select([ack_fd], [], [], _ACK_TIMEOUT_S)
    tracewriter.emit_fault(Action.FAULT_KILL_PARENT, worker=None)
    os.kill(os.getpid(), signal.SIGKILL)


def _fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return out


def _resource_tracker_fd() -> int | None:
    """The fd of this process's pipe to multiprocessing's resource tracker, if it started one."""
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_fd", None)


def threads_now() -> dict[int, str]:
    """The threads alive now, by ident (their names)."""
    return {t.ident or 0: t.name for t in threading.enumerate()}


def settle_threads(threads_before: dict[int, str], bound_s: float) -> None:
    """Give the threads the target started `bound_s` in all to finish what they were told.

    A loader's shutdown closes its queues asynchronously: `multiprocessing.Queue.close()` only
    hands its feeder thread a sentinel, and that thread closes both ends of the queue's pipe on
    its way out. Joined here (for `linger_s` at most, in all), such threads and fds are not counted
    as leaks; a thread still alive after the bound is one. (Also before the fd count a scenario
    takes after each loader it drops: `faultinject._play`.)
    """
    deadline = time.monotonic() + bound_s
    for t in threading.enumerate():
        if t.ident in threads_before or t is threading.current_thread():
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            return
        t.join(left)


def _settle_children(linger_s: float) -> list[int]:
    """Wait up to `linger_s` for the processes the target started to exit (not reaping them:
    a worker nobody joined must still show as a zombie); the pids still alive then.
    multiprocessing's helpers are not the target's workers and are not waited for."""
    alive = [p.pid for p in processes.children(helpers=False)]
    return processes.wait_gone(alive, linger_s)


class Job(NamedTuple):
    """What the child runs: `target(*args, **kwargs)`, then `linger_s` for its processes to
    exit; as a child subreaper with `subreaper`."""

    target: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    linger_s: float
    subreaper: bool


def announce_forks(fd: int) -> None:
    """Make every process forked from here on (by the target, its workers, theirs: the hook is
    inherited) write its pid to `fd` (non-blocking) before it runs anything else.

    The harness samples the process tree every 50 ms; a worker that starts, leaves a /dev/shm
    entry named with its pid and is killed between two looks would otherwise leave a leak the
    harness cannot tell from another program's. One write of 4 bytes is atomic on a pipe, so
    the announcements of concurrent forks never mix. (A process started by exec, a spawn
    worker, announces nothing: it takes far longer than one look to start.)"""
    pipe = os.fstat(fd)

    def announce() -> None:
        with contextlib.suppress(OSError):  # full pipe, or the harness gone: sampling remains
            now = os.fstat(fd)
            # A target that closed the fd may have reused its number: write only to our pipe.
            if (now.st_dev, now.st_ino) == (pipe.st_dev, pipe.st_ino):
                os.write(fd, PID_RECORD.pack(os.getpid()))

    os.register_at_fork(after_in_child=announce)


def run_job(out_fd: int, ack_fd: int, forked_fd: int, job: Job) -> int:
    """Run the target and send the result; return the exit code the child should use.
    `forked_fd`: where the processes forked from here announce themselves (`announce_forks`)."""
    announce_forks(forked_fd)
    with processes.subreaper() if job.subreaper else contextlib.nullcontext():
        return _run_job(out_fd, ack_fd, job)


def _run_job(out_fd: int, ack_fd: int, job: Job) -> int:
    global _channel, _child_pid, _baseline, _linger
    _linger = None
    _channel = (out_fd, ack_fd)
    _child_pid = os.getpid()
    target, args, kwargs, linger_s, _ = job
    _baseline = (_fds(), threads_now())
    _wire.send(out_fd, ("started", time.monotonic()))
    value: Any = None
    payload: bytes | None = None
    error: str | None = None
    try:
        value = target(*args, **kwargs)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are outcomes too.
        error = "".join(traceback.format_exception(exc))
        del exc
    else:
        try:
            payload = pickle.dumps(value)
        except Exception as exc:
            error = f"the target's return value could not be pickled: {exc!r}"
    # From here on the child only measures: the harness's deadline no longer binds it.
    _wire.send(out_fd, ("returned", time.monotonic()))
    if threading.current_thread() is threading.main_thread():
        # The target is over: a loader's SIGCHLD handler (torch raises its worker-death error
        # from one, in the main thread, wherever it is) must not cut the report short.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Drop what the target left us before measuring, as torch's own exit tests do.
    value = None
    gc.collect()
    fds_before, threads_before = _baseline
    if _linger is not None:
        linger_s = _linger
    # One wait for threads and processes together: linger_s in all.
    settled_by = time.monotonic() + linger_s
    settle_threads(threads_before, linger_s)
    lingering = _settle_children(max(0.0, settled_by - time.monotonic()))
    fds_after = _fds()
    # The pipe to multiprocessing's resource tracker (started by the first SharedMemory or
    # semaphore, e.g. SPDL's) serves the whole process, as the tracker process does, and the
    # trace file is the tracer's own: neither is a loader's leak.
    process_wide = {out_fd, ack_fd, _resource_tracker_fd(), tracewriter.log_fd()}
    leaked_fds = [
        f"{fd} -> {path}"
        for fd, path in sorted(fds_after.items())
        if fds_before.get(fd) != path and fd not in process_wide
    ]
    # The listdir above briefly opens /proc/self/fd itself; that fd is closed again.
    leaked_fds = [f for f in leaked_fds if not f.endswith(f"/proc/{os.getpid()}/fd")]
    threads_after = threads_now()
    leaked_threads = sorted(
        name for ident, name in threads_after.items() if ident not in threads_before
    )
    zombie_pids = processes.zombies()
    descendants = [p.pid for p in processes.children()]
    result = (payload, error, leaked_fds, leaked_threads, zombie_pids, descendants, lingering)
    _wire.send(out_fd, ("result", time.monotonic(), *result))
    return 0 if error is None else 1


def spawn_main() -> None:
    """Entry point of a `start="spawn"` child: argv holds the three fds (messages, acks, forks);
    the job comes over ack_fd.

    Exits through the interpreter's normal shutdown (atexit handlers, multiprocessing's cleanup),
    like the user's own script would.
    """
    out_fd, ack_fd, forked_fd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    path, pickled = _wire.recv_blocking(ack_fd)
    sys.path[:] = path
    job = pickle.loads(pickled)
    code = run_job(out_fd, ack_fd, forked_fd, job)
    sys.stdout.flush()
    sys.exit(code)
