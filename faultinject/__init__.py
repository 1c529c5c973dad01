"""faultinject: carry faults into any data loader's workers, and watch what it leaves behind.

Usable on its own (docs/faultinject.md). The parts:

* `faultinject.faults`: what goes wrong (`Die`, `Hang`, `Sleep`, `Raise`, `RaiseUnrebuildable`,
  `Unpicklable`, `Unloadable`, `SkewWorker`).
* `faultinject.datasets`: `FaultyDataset` (map-style) and `FaultyIterable` (uneven shards) carry
  them into the loader's workers; `faultinject.collate(...)` is a collate_fn that can die or
  raise, `faultinject.worker_init(...)` a worker_init_fn that records and can raise.
* `faultinject.records`: which worker fetched what, when (`read_fetches`), and a bounded wait
  for it (`RecordWatch`).
* `faultinject.processes`: outside faults by pid (psutil descendants, never private attributes);
  `sigchld_deferred()` keeps a loader's SIGCHLD handler from raising in a scenario's bookkeeping;
  `is_mp_helper`, `blocked_in_pipe_write`: the process predicates.
* `faultinject.limits`: `nofile(n)`, `small_shm()`.
* `faultinject.sandbox`: `run(target, ..., deadline_s=...)` in a session of its own; reports and
  reaps what is left.
* `faultinject.loaders`: a loader class by its `"pkg.mod:Class"` name, and what it says of itself
  (`unsupported`, `workers_die_with`).
* `faultinject.plan`: `Plan`, `Leave`, `Await`: what the user does, as plain data.
* `faultinject.driver`: `run(loader, Plan(...))` plays the user's moves against any loader in a
  sandbox (the child side: `faultinject._play`) and returns what the user saw (`Run`: typed
  events, `faultinject.events`); `workers(loader)`: what its workers are.

The parts that need torch (`datasets`, `collate`, `worker_init`) are imported on first use, so a
sandbox child started with `start="spawn"` does not pay for importing torch unless its target does.
"""

from __future__ import annotations

import importlib
from typing import Any

from loaderspec.faultinject import (
    driver,
    events,
    faults,
    limits,
    loaders,
    plan,
    processes,
    records,
    sandbox,
)
from loaderspec.faultinject.faults import (
    EVERY,
    Die,
    Hang,
    InjectedError,
    Raise,
    RaiseUnrebuildable,
    SkewWorker,
    Sleep,
    Unloadable,
    UnloadableItem,
    Unpicklable,
    UnpicklableItem,
    UnrebuildableError,
)
from loaderspec.faultinject.limits import Unsupported
from loaderspec.faultinject.records import Fetch, RecordWatch, read_fetches
from loaderspec.faultinject.sandbox import SandboxReport, kill_self

__all__ = [
    "EVERY",
    "Die",
    "FaultyCollate",
    "FaultyDataset",
    "FaultyIterable",
    "Fetch",
    "Hang",
    "InjectedError",
    "Raise",
    "RaiseUnrebuildable",
    "RecordWatch",
    "SandboxReport",
    "SkewWorker",
    "Sleep",
    "Unloadable",
    "UnloadableItem",
    "Unpicklable",
    "UnpicklableItem",
    "UnrebuildableError",
    "Unsupported",
    "collate",
    "datasets",
    "driver",
    "events",
    "faults",
    "kill_self",
    "limits",
    "loaders",
    "plan",
    "processes",
    "read_fetches",
    "records",
    "sandbox",
    "worker_init",
]

# name -> (module, attribute or None for the module itself); these import torch.
_LAZY = {
    "datasets": ("loaderspec.faultinject.datasets", None),
    "FaultyDataset": ("loaderspec.faultinject.datasets", "FaultyDataset"),
    "FaultyIterable": ("loaderspec.faultinject.datasets", "FaultyIterable"),
    "collate": ("loaderspec.faultinject._collate", "collate"),
    "FaultyCollate": ("loaderspec.faultinject._collate", "FaultyCollate"),
    "worker_init": ("loaderspec.faultinject._worker_init", "worker_init"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'faultinject' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
