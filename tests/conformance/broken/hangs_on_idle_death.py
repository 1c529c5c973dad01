"""Bug: with persistent workers the next epoch's iter() waits for every worker to acknowledge the
resume, with no liveness check, so a worker that died while the workers sat idle between epochs
makes the next iter() hang (WorkerDeathRaises, IterationTerminates). Every death during an epoch
is reported as the reference does."""

import threading
from typing import Any

import psutil

from broken._wrap import Relay, Wrapped


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.workers = kwargs.get("num_workers", 0)
        self.persistent = kwargs.get("persistent_workers", False)
        self.started = False

    def __iter__(self) -> Relay:
        if self.persistent and self.started:
            alive = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
            if len(alive) < self.workers:
                threading.Event().wait()  # the bug: waits for an ack a dead worker never sends
        self.started = True
        return super().__iter__()
