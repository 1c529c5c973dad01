"""`faultinject.worker_init(...)`: a worker_init_fn that records what the worker saw and can raise.

`worker_init_fn` is the one piece of user code a loader runs in each worker before it fetches
anything, so it is where a worker's start-up is observed (its id, seed, `get_worker_info()`) and
where a start-up failure is injected (`Raise(at=worker_id, point="in_worker_init")`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from loaderspec.faultinject import _fire
from loaderspec.faultinject.faults import Raise
from loaderspec.faultinject.records import WorkerInit, write_init

__all__ = ["FaultyWorkerInit", "worker_init"]


class FaultyWorkerInit:
    """Picklable worker_init_fn: writes a `WorkerInit` record (with `record_dir`), fires the
    `Raise(point="in_worker_init")` faults whose `at` is this worker's id, then calls `then`."""

    def __init__(
        self,
        faults: tuple[Raise, ...],
        record_dir: str | None,
        then: Callable[[int], Any] | None,
    ) -> None:
        for f in faults:
            if not isinstance(f, Raise) or f.point != "in_worker_init":
                raise ValueError(
                    f"worker_init() takes Raise(point='in_worker_init') faults, got {f!r}"
                )
        self.faults = faults
        self.record_dir = record_dir
        self.then = then

    def __call__(self, worker_id: int) -> None:
        if self.record_dir is not None:
            info = _fire.worker_info()
            record = WorkerInit(
                t=time.monotonic(),
                pid=os.getpid(),
                worker_id_arg=worker_id,
                worker_id=-1 if info is None else int(info.id),
                num_workers=0 if info is None else int(info.num_workers),
                seed=-1 if info is None else int(info.seed),
                torch_seed=int(torch.initial_seed()),
                tid=threading.get_native_id(),
            )
            write_init(self.record_dir, record)
        for f in self.faults:
            if f.at == worker_id:
                _fire.fire_raise(f)
        if self.then is not None:
            self.then(worker_id)


def worker_init(
    *faults: Raise,
    record_dir: str | os.PathLike[str] | None = None,
    then: Callable[[int], Any] | None = None,
) -> FaultyWorkerInit:
    """A worker_init_fn carrying `faults` (each `Raise(at=worker_id, point="in_worker_init")`),
    recording each call in `record_dir` (`faultinject.records.read_inits`) and then calling the
    user's own `then` (module-level, so it pickles)."""
    directory = None if record_dir is None else os.fspath(record_dir)
    return FaultyWorkerInit(tuple(faults), directory, then)
