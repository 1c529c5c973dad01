"""Plans that more than one user plays: the same scenario for a conformance case and a bench
figure, so the two measure one thing.

`parent_dies_while(state)`: the loader's process is SIGKILLed while its workers are idle, busy
inside `__getitem__`, or blocked writing a result nobody reads; played with an `orphan_grace_s`,
the sandbox's `orphan_exit_s` then says how long each worker outlived its parent.
"""

from __future__ import annotations

from typing import Literal

from loaderspec.faultinject.faults import EVERY, Die, Fault, Sleep
from loaderspec.faultinject.plan import Await, Leave, Plan

__all__ = ["WORKER_STATES", "parent_dies_while"]

WorkerState = Literal["idle", "busy", "blocked"]
WORKER_STATES: tuple[WorkerState, ...] = ("idle", "busy", "blocked")
BUSY_S = 60.0  # how long each fetch takes while "busy": far longer than any bound that waits


def parent_dies_while(state: WorkerState, *, workers: int = 2, items: int = 8) -> Plan:
    """SIGKILL the loader's process once its `workers` workers are in `state`:

    * `"idle"`: every batch taken and the iterator kept, so the workers wait for work;
    * `"busy"`: every fetch takes `BUSY_S`; each worker has started one;
    * `"blocked"`: every item is bigger than a pipe and nobody reads; each worker has made one
      and is writing it (`Die(point="blocked_put", signal=None)`: the harness acts).
    """
    kwargs = {"num_workers": workers, "prefetch_factor": 2, "batch_size": 1}
    if state == "idle":
        return Plan(n=items, kwargs=kwargs, leave={0: Leave("kill_parent", items)})
    if state == "busy":
        faults: tuple[Fault, ...] = (Sleep(EVERY, BUSY_S),)
        reached = Await("fetch", count=workers)
    else:
        faults = (Die(EVERY, signal=None, point="blocked_put"),)
        reached = Await("fetched", count=workers)
    return Plan(
        n=items,
        faults=faults,
        kwargs=kwargs,
        leave={0: Leave("kill_parent", 0)},
        before_leave=reached,
    )
