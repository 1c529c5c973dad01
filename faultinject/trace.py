"""`Fault*` trace records, written by whoever injects a fault, just before injecting it.

The format is architecture.md's "Trace records": one JSON line per record in
`$LOADERSPEC_TRACE_DIR/trace-<pid>.jsonl`, `t` from `time.monotonic_ns()` (system-wide on Linux, so
files of different processes merge by `t`), actor `"Fault"`, an empty `state`. Tracing is off, and
free, unless `LOADERSPEC_TRACE_DIR` is set. This module must not import the reference loader: it
runs inside foreign loaders' workers.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Literal

from faultinject import _jsonl

__all__ = ["TRACE_ENV", "FaultAction", "emit_fault"]

TRACE_ENV = "LOADERSPEC_TRACE_DIR"

FaultAction = Literal["FaultKillWorker", "FaultKillParent", "FaultHangWorker", "FaultFetchError"]


def emit_fault(action: FaultAction, *, worker: int | None, task: int | None = None) -> None:
    """Log `action` if tracing is on. `worker` is the worker id concerned (None if unknown);
    `task` the loader's task index, which a dataset cannot know, so usually None."""
    directory = os.environ.get(TRACE_ENV)
    if not directory:
        return
    pid = os.getpid()
    record = {
        "t": time.monotonic_ns(),
        "pid": pid,
        "actor": "Fault",
        "action": action,
        "worker": worker,
        "task": task,
        "state": {},
    }
    # A missing or full trace directory must not change the fault being injected.
    with contextlib.suppress(OSError):
        _jsonl.append(os.path.join(directory, f"trace-{pid}.jsonl"), record)
