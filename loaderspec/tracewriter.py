"""The one trace writer: JSON-lines records of spec actions, one file per process.

Owns turning tracing on and off (``LOADERSPEC_TRACE_DIR``, ``trace_to(dir)``, ``configure``) and
writing the four record types of ``loaderspec.vocabulary.RECORD_FIELDS`` to
``DIR/trace-<pid>.jsonl`` (format: docs/architecture.md "Trace records", docs/contracts.md). The
reference loader writes its Main, Worker and Pin records through it, faultinject its ``Fault*``
records. Does not know the protocol: callers pass the ``Action``, its fields and the post-state;
the actor is the action's (``Action.actor``), so the two cannot disagree.

Must not import torch, the reference loader or faultinject: it runs inside any loader's workers.

Free when off: callers test the module-level ``ENABLED`` flag before building a record
(``if tracewriter.ENABLED: tracewriter.emit(...)``); ``emit`` itself also returns at once when off.

Each record is one ``os.write`` on an ``O_APPEND`` descriptor, so a process killed mid-run loses
no record it has written and lines never interleave. Timestamps are ``time.monotonic_ns()``
(system-wide on Linux), so the files of different processes merge by ``t``.

Fault records follow the environment variable at the moment of the fault, not ``configure``: a
fault may be injected by a harness process or a foreign loader's worker that never configured
tracing. They open, append and close (a fault is rare, and a descriptor kept open would count as
a leak in the harness's accounting).
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

from loaderspec.vocabulary import (
    CONFIG_ACTION,
    OPTIONAL_FIELDS,
    RECORD_FIELDS,
    TRACE_DIR_ENV,
    TRACE_FILE,
    Action,
    Actor,
    RecordType,
    UserAction,
)

__all__ = [
    "ENABLED",
    "configure",
    "configure_from_env",
    "emit",
    "emit_config",
    "emit_fault",
    "emit_last",
    "emit_user",
    "fetch_began",
    "log_fd",
    "trace_to",
]

ENABLED: bool = False
_dir: str | None = None
_fd: int | None = None
_fd_pid: int | None = None  # the process that opened _fd (a forked child must open its own)
# One writer at a time per process, so records of one process are in the file in the order of
# their ``t``; ``emit_last`` keeps it for good (see there). A forked child gets a fresh lock: a
# thread of the parent may have held it at the fork.
_write_lock = threading.Lock()


def _fresh_in_child() -> None:
    """A forked child: a fresh lock (a thread of the parent may have held it at the fork), the
    parent's descriptor closed, and, tracing, its own file opened now (see ``configure``)."""
    global _write_lock, _fd, _fd_pid
    _write_lock = threading.Lock()
    if _fd is not None:
        with contextlib.suppress(OSError):
            os.close(_fd)
        _fd, _fd_pid = None, None
    if ENABLED:
        with contextlib.suppress(OSError):
            _file()


os.register_at_fork(after_in_child=_fresh_in_child)


def configure(directory: str | os.PathLike[str] | None) -> None:
    """Trace into ``directory`` from now on (None: stop tracing).

    The process's file is opened now, not at its first record: a process that later runs out of
    file descriptors (a case that exhausts them on purpose) still logs, and tracing does not
    change where it runs out. The same directory again keeps the open file.
    """
    global ENABLED, _dir
    new = None if directory is None else os.fspath(directory)
    if new == _dir and (new is None or _fd_pid == os.getpid()):
        return
    _close()
    if new is None:
        ENABLED, _dir = False, None
        return
    Path(new).mkdir(parents=True, exist_ok=True)
    ENABLED, _dir = True, new
    with contextlib.suppress(OSError):  # a record's write tries again (_NEVER_RAISES)
        _file()


def configure_from_env() -> None:
    """Follow ``LOADERSPEC_TRACE_DIR`` (called at import, and by each worker at its start)."""
    configure(os.environ.get(TRACE_DIR_ENV) or None)


@contextlib.contextmanager
def trace_to(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Trace every loader started inside the block, workers included (also spawned ones).

    The environment variable is set for the block so that spawned and forkserver workers, which
    import this module afresh, and fault injectors trace too; both are restored afterwards.
    """
    previous = os.environ.get(TRACE_DIR_ENV)
    os.environ[TRACE_DIR_ENV] = os.fspath(directory)
    configure(directory)
    try:
        yield Path(directory)
    finally:
        if previous is None:
            os.environ.pop(TRACE_DIR_ENV, None)
        else:
            os.environ[TRACE_DIR_ENV] = previous
        configure(previous)


def log_fd() -> int | None:
    """This process's open trace file descriptor, if any: the harness's own instrument, which
    a leak check of the loader under test must not count."""
    return _fd if _fd is not None and _fd_pid == os.getpid() else None


def _close() -> None:
    global _fd, _fd_pid
    if _fd is not None and _fd_pid == os.getpid():
        with contextlib.suppress(OSError):
            os.close(_fd)
    _fd, _fd_pid = None, None


def _open(directory: str, pid: int) -> int:
    path = os.path.join(directory, TRACE_FILE.format(pid=pid))
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)


def _file() -> int:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd is None or _fd_pid != pid:
        assert _dir is not None  # the callers checked ENABLED
        _fd, _fd_pid = _open(_dir, pid), pid
    return _fd


# _NEVER_RAISES: writing a record never raises into the traced process (a loader that runs out
# of file descriptors must fail as it would untraced); a record that cannot be written is lost,
# and trace-check then rejects the run where the lost step is missing.


def _line(shape: RecordType, fields: dict[str, Any]) -> bytes:
    record = {
        name: fields.get(name)
        for name in RECORD_FIELDS[shape]
        if name not in OPTIONAL_FIELDS or fields.get(name) is not None
    }
    return (json.dumps(record, separators=(",", ":")) + "\n").encode()


def emit(
    action: Action,
    *,
    epoch: int | None = None,
    worker: int | None = None,
    task: int | None = None,
    kind: str | None = None,
    state: dict[str, Any] | None = None,
    t: int | None = None,
    origin: tuple[int, int, int] | None = None,
    user: str | None = None,
) -> None:
    """Append one record of a Main, Worker or Pin ``action``. A no-op when tracing is off.

    ``t``: when the action happened, if not now (``time.monotonic_ns()`` taken earlier: a
    ``WorkerFetch`` is logged after the fetch, for its ``kind``, but happened when the index
    arrived). ``state``: the actor's post-state (Main records), else empty. ``origin``: the
    (worker, task, epoch) of the result message the step moves (the payload-origin ghost).
    ``user``: MainProcessData, the fingerprint of the user's state the batch brought.
    """
    if not ENABLED:
        return
    fields = {
        "t": time.monotonic_ns() if t is None else t,
        "pid": os.getpid(),
        "actor": action.actor.value,
        "action": action.value,
        "epoch": epoch,
        "worker": worker,
        "task": task,
        "kind": kind,
        "state": {} if state is None else state,
        "origin": None if origin is None else list(origin),
        "user": user,
    }
    with _write_lock, contextlib.suppress(OSError):  # see _NEVER_RAISES
        os.write(_file(), _line(RecordType.STEP, fields))


def emit_config(config: dict[str, Any], *, t: int | None = None) -> None:
    """Append an iterator's ``Config`` header (``CONFIG_FIELDS``), dated ``t``
    (``time.monotonic_ns()``; None: now). A no-op when tracing is off."""
    if not ENABLED:
        return
    fields = {
        "t": time.monotonic_ns() if t is None else t,
        "pid": os.getpid(),
        "actor": Actor.MAIN.value,
        "action": CONFIG_ACTION,
        "epoch": 0,
        "state": {},
        "config": config,
    }
    with _write_lock, contextlib.suppress(OSError):  # see _NEVER_RAISES
        os.write(_file(), _line(RecordType.CONFIG, fields))


def emit_user(
    action: UserAction,
    checkpoint: dict[str, Any],
    *,
    epoch: int | None = None,
    state: dict[str, Any] | None = None,
) -> None:
    """Append a ``UserAction`` record: the checkpoint ``state_dict()`` returned or
    ``load_state_dict()`` was given (``CHECKPOINT_FIELDS``); ``epoch`` and ``state``, the
    main-process post-state, when a live iterator's core took the step (None: the record
    belongs to the next iterator, docs/checkpoint.md). A no-op when tracing is off."""
    if not ENABLED:
        return
    fields = {
        "t": time.monotonic_ns(),
        "pid": os.getpid(),
        "actor": action.actor.value,
        "action": action.value,
        "epoch": epoch,
        "state": state,
        "checkpoint": checkpoint,
    }
    record = {name: value for name, value in fields.items() if value is not None}
    with _write_lock, contextlib.suppress(OSError):  # see _NEVER_RAISES
        os.write(_file(), (json.dumps(record, separators=(",", ":")) + "\n").encode())


def emit_last(action: Action, *, epoch: int | None = None, worker: int | None = None) -> None:
    """Append this process's last record, just before it ends itself (``os._exit``) from a thread
    other than the one doing its work (the worker's parent-death watchdog): the write lock is
    taken and never given back, so no other thread logs a step after it that never took effect.
    """
    if not ENABLED:
        return
    _write_lock.acquire()
    fields: dict[str, Any] = {
        "t": time.monotonic_ns(),
        "pid": os.getpid(),
        "actor": action.actor.value,
        "action": action.value,
        "epoch": epoch,
        "worker": worker,
        "state": {},
    }
    with contextlib.suppress(OSError):  # see _NEVER_RAISES
        os.write(_file(), _line(RecordType.STEP, fields))


# When this process's current fetch took its index (``fetch_began``): a fault of that fetch (a
# hang, an error) is the step of taking the index, so its record gets that time, not the time
# the dataset raised or began to hang (which can come after the main process's later steps).
_fetch_t: int | None = None
_FETCH_FAULTS = (Action.FAULT_HANG_WORKER, Action.FAULT_FETCH_ERROR)


def fetch_began(t: int | None) -> None:
    """A worker's fetch took its index at ``t`` (``time.monotonic_ns()``); None: it is over."""
    global _fetch_t
    _fetch_t = t


def emit_fault(
    action: Action, *, worker: int | None, task: int | None = None, victim: int | None = None
) -> None:
    """Log a ``Fault*`` ``action`` if ``LOADERSPEC_TRACE_DIR`` is set now; call it just before
    injecting a fault into this process, just after signalling another (the victim may still
    record a step before the signal lands: ``faultinject.processes.kill``). ``worker``: the
    loader's worker id concerned (None if unknown); ``task``
    the loader's task index, which a dataset cannot know, so usually None; ``victim``: the pid
    the fault hits, when the injector knows the pid and not the worker id (trace-check maps it
    through the header's ``worker_pids``). Never raises for a missing or full trace directory:
    that must not change the fault being injected.
    """
    if action.actor is not Actor.FAULT:
        raise ValueError(f"{action.value} is not a fault action (Action.FAULT_*)")
    directory = os.environ.get(TRACE_DIR_ENV)
    if not directory:
        return
    pid = os.getpid()
    t = _fetch_t if _fetch_t is not None and action in _FETCH_FAULTS else time.monotonic_ns()
    fields = {
        "t": t,
        "pid": pid,
        "actor": Actor.FAULT.value,
        "action": action.value,
        "worker": worker,
        "task": task,
        "state": {},
        "victim": victim,
    }
    with _write_lock, contextlib.suppress(OSError):
        fd = _open(directory, pid)
        try:
            os.write(fd, _line(RecordType.FAULT, fields))
        finally:
            os.close(fd)


configure_from_env()
