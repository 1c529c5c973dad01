"""Bug: with persistent workers the next epoch's iter() waits for every worker to acknowledge the
resume, with no liveness check, so a worker that died while the workers sat idle between epochs
makes the next iter() hang (WorkerDeathRaises, IterationTerminates). Every death during an epoch
is reported as the reference does."""

import threading
from typing import Any

from broken._wrap import Relay, Wrapped


class Loader(Wrapped):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.persistent = kwargs.get("persistent_workers", False)
        self.started = False

    def __iter__(self) -> Relay:
        if self.persistent and self.started:
            # The reference's own workers (its iterator keeps their Process objects, as torch's
            # does), not this process's children: a child of anything else (a resource
            # tracker) would pass for a live worker and hide the bug.
            workers = getattr(getattr(self.inner, "_iterator", None), "_workers", [])
            if not all(w.is_alive() for w in workers):
                threading.Event().wait()  # the bug: waits for an ack a dead worker never sends
        self.started = True
        return super().__iter__()
