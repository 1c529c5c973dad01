"""Sandbox targets that run a torch DataLoader over a faulty dataset.

A loader whose worker is killed installs a SIGCHLD handler that raises in whatever the main thread
is doing, even inside pytest's reporting; so every scenario that kills a worker runs in a sandbox
child and only its summary comes back. Inside the child, the scenario's own bookkeeping (finding
the workers, summarizing the error, dropping the iterator) runs with SIGCHLD held back
(`processes.sigchld_deferred`): the handler may raise only inside the loop, where the error is
caught, as in a user's script. Without it, a worker that died while the iterator was being made
(an early `Die`, on a loaded machine) made the handler raise inside `new_children` and the whole
scenario "raised" with torch's signal_handling RuntimeError.
"""

from __future__ import annotations

import signal
import time
import traceback
from typing import Any

import torch
from loaderspec.faultinject import processes
from torch.utils.data import DataLoader


def _summary(exc: BaseException | None) -> tuple[str, str] | None:
    """(type name, message); also clears the frames of its traceback.

    torch's `ExceptionWrapper.reraise` keeps the exception in a local of the frame it raises
    from, a cycle that keeps the iterator alive until gc; collected by gc, the iterator's queues
    may be finalized before it and its shutdown waits 5 s per worker. Clearing the frames breaks
    the cycle, so `del it` shuts the workers down at once.
    """
    if exc is None:
        return None
    cause: BaseException | None = exc
    while cause is not None:
        traceback.clear_frames(cause.__traceback__)
        cause = cause.__cause__ or cause.__context__
    return (type(exc).__name__, str(exc))


def as_list(batch: list[Any]) -> list[Any]:
    """A collate_fn that keeps the batch a plain list: no tensor, so no fd passing.

    torch shares a worker's tensors by passing fds through the worker's resource sharer; a
    worker killed with such a result in flight gives the main process a ConnectionResetError,
    and torch's handling of it (an fd-limit probe opening ten NamedTemporaryFiles) can be cut
    short by its own SIGCHLD handler, leaving a /tmp/tmpXXXXXXXX file and its fd open (seen
    under load). Scenarios about where a fault fires use plain lists; that torch leak is not
    theirs to judge.
    """
    return list(batch)


def as_list_marking(path: Any, batch: list[Any]) -> list[Any]:
    """``as_list`` that also appends the batch's items to ``path`` ("2,3"), so a test can see
    that the batch was made (a worker killed right after collate leaves no other trace)."""
    with open(path, "a") as f:
        f.write(",".join(map(str, batch)) + "\n")
    return list(batch)


def _flat(batch: Any) -> list[int]:
    return torch.as_tensor(batch).flatten().tolist()


def _start(loader: Any) -> tuple[Any, list[int]]:
    """`iter(loader)` and the pids of the workers it started (also those already dead)."""
    before = {p.pid for p in processes.children()}
    it = iter(loader)
    return it, processes.new_children(before, exited=True)


def _consume(loader: Any) -> dict[str, Any]:
    """Iterate `loader` once to its end or first error, with SIGCHLD held back everywhere but
    in the loop itself; the iterator is dropped before returning."""
    items: list[int] = []
    error = None
    with processes.sigchld_deferred() as held:
        it, workers = _start(loader)
        try:
            with held.released():
                for batch in it:
                    items.extend(_flat(batch))
        except Exception as e:
            error = _summary(e)
        del it
    return {"items": items, "error": error, "workers": workers}


def drain(ds: Any, **kw: Any) -> dict[str, Any]:
    """Iterate a DataLoader(ds, **kw) until it ends or raises; return what happened."""
    kw.setdefault("num_workers", 2)
    kw.setdefault("multiprocessing_context", "fork")
    return _consume(DataLoader(ds, **kw))


def blocked_put(ds: Any, harness_kills: bool, bound_s: float) -> dict[str, Any]:
    """One worker whose first result does not fit the pipe, and a main process that does not
    read; the worker (or, with `harness_kills`, this function) kills it while it is blocked.
    `next()` is never called: reading the torn result races torch's SIGCHLD handler."""
    with processes.sigchld_deferred():
        # torch's SIGCHLD handler would raise wherever the main thread is; held back, it runs
        # after the block, when the iterator (and its registration of the worker) is gone.
        before = {p.pid for p in processes.children()}
        it = iter(DataLoader(ds, batch_size=None, num_workers=1, timeout=bound_s))
        [worker] = processes.new_children(before)
        blocked = processes.wait_blocked(worker, bound_s)
        if harness_kills:
            processes.kill([worker], signal.SIGKILL)
        still = processes.wait_gone([worker], bound_s)
        del it  # held until here: the loader must stay alive while its worker is blocked
    return {"worker": worker, "blocked": blocked, "alive_after": still}


def drain_epochs(ds: Any, epochs: int, **kw: Any) -> list[dict[str, Any]]:
    """`drain` a fresh iterator of one loader `epochs` times."""
    kw.setdefault("num_workers", 2)
    kw.setdefault("multiprocessing_context", "fork")
    dl = DataLoader(ds, **kw)
    return [_consume(dl) for _ in range(epochs)]


def busy_worker_then_kill_self(ds: Any, record_dir: str, bound_s: float) -> None:
    """Start a 1-worker loader whose dataset hangs at item 0; once the worker is inside that
    fetch (its record is written), SIGKILL this process (the loader's owner)."""
    from loaderspec.faultinject import read_fetches, sandbox

    it = iter(DataLoader(ds, batch_size=None, num_workers=1))
    deadline = time.monotonic() + bound_s
    while not read_fetches(record_dir) and time.monotonic() < deadline:
        time.sleep(0.005)  # bounded poll of a file another process writes
    sandbox.kill_self()
    del it  # not reached


def drain_with(loader_path: str, ds: Any, **kw: Any) -> dict[str, Any]:
    """`drain` with the loader class named `module:Class` instead of torch's."""
    from loaderspec.faultinject import loaders

    return _consume(loaders.resolve(loader_path)(ds, **kw))


def take_one_then_wait_for_death(ds: Any, bound_s: float) -> dict[str, Any]:
    """Take one batch of a 1-worker loader, then consume nothing until the worker is gone (or
    `bound_s` passed); then drain the rest. For faults that fire in an idle worker."""
    items: list[int] = []
    error = None
    with processes.sigchld_deferred() as held:
        it, [worker] = _start(DataLoader(ds, batch_size=1, num_workers=1, collate_fn=as_list))
        try:
            with held.released():
                items.extend(_flat(next(it)))
            t0 = time.monotonic()
            alive = processes.wait_gone([worker], bound_s)
            gone_after_s = time.monotonic() - t0
            with held.released():
                for batch in it:
                    items.extend(_flat(batch))
        except Exception as e:
            error = _summary(e)
        del it
    return {
        "items": items,
        "error": error,
        "worker": worker,
        "alive": alive,
        "gone_after_s": gone_after_s,
    }
