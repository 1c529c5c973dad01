"""Opt-in trace records of the reference loader: one JSON line per spec action.

Owns: turning tracing on (``LOADERSPEC_TRACE_DIR`` or ``trace_to(dir)``), and writing records to
``DIR/trace-<pid>.jsonl`` (format: docs/architecture.md, "Trace records"). Does not know the
protocol: callers pass the action, the fields and the post-state.

Free when off: callers test the module-level ``ENABLED`` flag before building a record
(``if tracing.ENABLED: tracing.emit(...)``); ``emit`` itself also returns at once when off.

Each record is written with one ``os.write`` on an ``O_APPEND`` descriptor, so a process killed
mid-run loses no record it has written and lines from one process never interleave. Timestamps
are ``time.monotonic_ns()`` (system-wide on Linux), so files of different processes merge by ``t``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV_VAR = "LOADERSPEC_TRACE_DIR"
# The longest a traced process waits for the shell's trace-order lock (shell._set_workers_done):
# a worker killed while holding it must not stall the shutdown; the trace is then unordered.
ORDER_WAIT_S = 0.2

ENABLED: bool = False
_dir: str | None = None
_fd: int | None = None
_fd_pid: int | None = None  # the process that opened _fd (a forked child must open its own)
# One writer at a time per process, so records of one process are in the file in the order of
# their ``t``; ``emit_last`` keeps it for good (see there). A forked child gets a fresh lock: a
# thread of the parent may have held it at the fork.
_write_lock = threading.Lock()


def _fresh_lock_in_child() -> None:
    global _write_lock
    _write_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def configure(directory: str | os.PathLike[str] | None) -> None:
    """Trace into ``directory`` from now on (None: stop tracing). Closes this process's file."""
    global ENABLED, _dir
    _close()
    if directory is None:
        ENABLED, _dir = False, None
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    ENABLED, _dir = True, os.fspath(directory)


def configure_from_env() -> None:
    """Follow ``LOADERSPEC_TRACE_DIR`` (called at import, and by each worker at start)."""
    configure(os.environ.get(ENV_VAR) or None)


@contextlib.contextmanager
def trace_to(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Trace every loader started inside the block, workers included (also spawned ones).

    The environment variable is set for the block so spawned and forkserver workers, which
    import this module afresh, trace too; both are restored afterwards.
    """
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = os.fspath(directory)
    configure(directory)
    try:
        yield Path(directory)
    finally:
        if previous is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = previous
        configure(previous)


def _close() -> None:
    global _fd, _fd_pid
    if _fd is not None and _fd_pid == os.getpid():
        with contextlib.suppress(OSError):
            os.close(_fd)
    _fd, _fd_pid = None, None


def _file() -> int:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_pid != pid:
        assert _dir is not None  # emit() checked ENABLED
        path = os.path.join(_dir, f"trace-{pid}.jsonl")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        _fd_pid = pid
    return _fd


def emit(
    action: str,
    actor: str,
    *,
    epoch: int | None = None,
    worker: int | None = None,
    task: int | None = None,
    kind: str | None = None,
    state: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    t: int | None = None,
) -> None:
    """Append one record for ``action``. A no-op when tracing is off.

    ``t``: when the action happened, if not now (``time.monotonic_ns()`` taken earlier: a
    ``WorkerFetch`` is logged after the fetch, for its ``kind``, but happened when the index
    arrived).
    """
    if not ENABLED:
        return
    with _write_lock:
        _write(action, actor, epoch, worker, task, kind, state, config, t)


def emit_last(
    action: str, actor: str, *, epoch: int | None = None, worker: int | None = None
) -> None:
    """Append this process's last record, just before it ends itself (``os._exit``) from a thread
    other than the one doing its work (the worker's parent-death watchdog): the write lock is
    taken and never given back, so no other thread logs a step after it that never took effect.
    """
    if not ENABLED:
        return
    _write_lock.acquire()
    _write(action, actor, epoch, worker, None, None, None, None, None)


def _write(
    action: str,
    actor: str,
    epoch: int | None,
    worker: int | None,
    task: int | None,
    kind: str | None,
    state: dict[str, Any] | None,
    config: dict[str, Any] | None,
    t: int | None,
) -> None:
    record: dict[str, Any] = {
        "t": time.monotonic_ns() if t is None else t,
        "pid": os.getpid(),
        "actor": actor,
        "action": action,
        "epoch": epoch,
        "worker": worker,
        "task": task,
    }
    if kind is not None:
        record["kind"] = kind
    record["state"] = state if state is not None else {}
    if config is not None:
        record["config"] = config  # the per-iterator "Config" header only
    os.write(_file(), (json.dumps(record, separators=(",", ":")) + "\n").encode())


configure_from_env()
