"""Shared by the adapter tests: the registry's adapters (`ADAPTERS`, `load`, `ref`), the fixture
that reaps finished workers, and the sandbox targets that drive any loader named "module:Class"
(module-level: the sandbox pickles them by reference)."""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import traceback
from typing import Any

import pytest
import torch
from loaderspec.faultinject import loaders, processes, sandbox
from torch.utils.data import DataLoader

from loaderspec import faultinject, graded

# StatefulDataLoader is tested in test_adapters.py; every other adapter of the registry here.
ADAPTERS = {g.name: g for g in graded.ADAPTERS if g.name != "torchdata"}


def ref(name: str) -> str:
    return ADAPTERS[name].loader


def load(name: str) -> type:
    # The adapter module (it raises ImportError naming the extra), not the package: streaming's
    # package __init__ cannot be imported beside torch's CPU build, its adapter can.
    entry = ADAPTERS[name]
    module, cls = entry.loader.split(":")
    try:
        adapter = importlib.import_module(module)
    except ImportError:
        pytest.skip(f"{entry.distribution} is the optional extra loaderspec[{entry.extra}]")
    return getattr(adapter, cls)


@pytest.fixture(autouse=True)
def reap_finished_workers():
    """torchdata's and paddle's loaders run in this process may leave finished workers unjoined
    (zombies until their Process objects are polled); reap them, so that later tests' leak
    checks see only processes of their own."""
    yield
    gc.collect()
    multiprocessing.active_children()  # joins every finished child it still holds


def flat(batches):
    out = []
    for b in batches:
        out.extend(b.tolist() if isinstance(b, torch.Tensor) else [b])
    return out


# Sandbox targets (module-level: the sandbox pickles them by reference).


def as_list(batch: list[Any]) -> list[Any]:
    """A collate_fn without tensors: a killed worker then has no fd in flight, whose loss makes
    torch leak a temp file (docs/faultinject.md, torch's SIGCHLD handler)."""
    return list(batch)


def first_batches_then_drop(
    loader_path: str, ds: Any, iter_bound_s: float, loader_bound_s: float
) -> dict[str, Any]:
    """Take one batch, drop the iterator, then the loader; which workers outlived each drop
    (waiting up to the bound after each)."""
    cls = loaders.resolve(loader_path)
    loader = cls(ds, batch_size=1, num_workers=2, multiprocessing_context="fork")
    before = {p.pid for p in processes.children()}
    it = iter(loader)
    next(it)
    workers = processes.new_children(before)
    del it
    gc.collect()
    after_iter = processes.wait_gone(workers, iter_bound_s)
    del loader
    gc.collect()
    after_loader = processes.wait_gone(workers, loader_bound_s)
    return {"workers": workers, "after_iter": after_iter, "after_loader": after_loader}


def drain(loader_path: str, ds: Any, **kw: Any) -> dict[str, Any]:
    """Iterate the loader until it ends or raises; items, error and workers back. SIGCHLD is
    held back (a loader's handler may raise) everywhere but in the loop itself."""
    cls = loaders.resolve(loader_path)
    items: list[Any] = []
    error = None
    with processes.sigchld_deferred() as held:
        before = {p.pid for p in processes.children()}
        it = iter(cls(ds, **kw))
        workers = processes.new_children(before)
        try:
            with held.released():
                for batch in it:
                    items.extend(torch.as_tensor(batch).flatten().tolist())
        except Exception as e:
            traceback.clear_frames(e.__traceback__)
            error = (type(e).__name__, str(e))
        del it
    return {"items": items, "error": error, "workers": workers}


def assert_drains_as_torch(name: str, n: int, kw: dict[str, Any], deadline_s: float) -> None:
    """Drain adapter `name` over `FaultyDataset(n)` with `kw` in a sandbox child (a loader that
    keeps something per process, shared memory or a Ray connection, keeps it there): no error,
    and torch's items in torch's order."""
    ds = faultinject.FaultyDataset(n)
    report = sandbox.run(drain, ref(name), ds, deadline_s=deadline_s, **kw)
    assert report.outcome == "returned", report.error
    assert report.value["error"] is None
    assert report.value["items"] == flat(DataLoader(ds, **kw))


def busy_then_die(loader_path: str, ds: Any) -> None:
    """Take one batch of a 2-worker loader whose workers still have work (a long epoch), then
    SIGKILL this process (the loader's): do its workers outlive it? (`SandboxReport.orphans`,
    `orphan_exit_s`)."""
    from loaderspec.faultinject import kill_self

    cls = loaders.resolve(loader_path)
    it = iter(cls(ds, batch_size=1, num_workers=2))
    next(it)
    kill_self()


def shm_held() -> set[str]:
    """The /dev/shm entries this process holds open."""
    import psutil

    return {f.path for f in psutil.Process().open_files() if f.path.startswith("/dev/shm/")}


def shm_after_drops(loader_path: str, loaders_made: int) -> dict[str, Any]:
    """Make, drain and drop `loaders_made` 1-worker loaders (collecting after each): how many
    `/dev/shm/<prefix>_locals` entries this process still holds open, and which of the entries
    a child process held (one loader, drained, still referenced) exist after it exited."""
    import os
    import subprocess
    import sys

    cls = loaders.resolve(loader_path)
    for _ in range(loaders_made):
        loader = cls(list(range(4)), batch_size=2, num_workers=1)
        list(loader)
        del loader
        gc.collect()
    held = [path for path in shm_held() if path.endswith("_locals")]
    child = (
        "from loaderspec.faultinject import loaders; from adapter_scenarios import shm_held; "
        f"loader = loaders.resolve({loader_path!r})([1]); list(loader); print(*shm_held())"
    )
    here = os.path.dirname(os.path.abspath(__file__))  # adapter_scenarios, for the child
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", child]
    out = subprocess.run(
        argv, check=True, timeout=60, capture_output=True, text=True, env=env
    ).stdout.split()
    return {
        "prefixes": len(held),
        "child_held": out,
        "after_exit": [p for p in out if os.path.exists(p)],
    }
