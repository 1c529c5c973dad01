"""Scenarios: what runs inside the sandboxed child, against the loader under test.

Each scenario builds a loader from the public constructor (torch 2.13's arguments), drives it
only through ``iter``/``next``/``del``/``break``, finds worker pids only as psutil children, and
streams what happened to the parent as it happens (``send_note``), so a hang still leaves a
partial record. At the end it drops every reference and reports leaks (conformance._watch).
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from conformance import _datasets as ds
from conformance._sandbox import kill_self, send_note
from conformance._watch import Watch

LEAK_GRACE_S = 15.0  # MUST bound for workers to be gone after the loader was dropped


def flat(batch: Any) -> list[Any]:
    """A batch of ints (tensor, ndarray or list) as a flat list of Python values."""
    if hasattr(batch, "tolist"):
        out = batch.tolist()
        return out if isinstance(out, list) else [out]
    if isinstance(batch, (list, tuple)):
        items: list[Any] = []
        for x in batch:
            items.extend(flat(x))
        return items
    return [batch]


def tagged(batch: Any) -> list[tuple[int, int]]:
    """A batch of ``[index, epoch]`` items (collated as two columns) as (index, epoch) pairs."""
    index, epoch = batch
    return list(zip(flat(index), flat(epoch), strict=True))


@dataclass
class Plan:
    """One generic scenario: a dataset, the loader's arguments and how the user drives it."""

    dataset: str = "map"  # "map" | "iter"
    n: int = 8  # map-style length
    shards: tuple[int, ...] = ()  # iterable: items per worker
    faults: tuple[ds.Fault, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)  # the loader's constructor arguments
    epochs: int = 1
    stop_after: dict[int, tuple[str, int]] = field(default_factory=dict)  # epoch -> (how, k)
    max_errors: int = 0  # errors tolerated (and driven past) per epoch
    max_events: int = 10_000  # per epoch
    epoch_tag: bool = False  # items are [index, epoch] with the epoch written before iter()
    probe: bool = False
    wait_fetch: int | None = None  # before stopping early: wait until this index was fetched
    kill_worker_after: int | None = None  # batches taken before SIGKILL of one worker (by pid)
    nofile: int | None = None  # RLIMIT_NOFILE soft limit for the scenario
    len_of_loader: bool = False


class _Boom(Exception):
    """The user's own exception, raised inside the for loop."""


def _start_mp_helpers(method: Any) -> None:
    """Start the helpers spawn/forkserver keep for the process's whole life (resource tracker,
    forkserver) before the baseline, so their pipes are not counted as the loader's leaks."""
    if method not in ("spawn", "forkserver"):
        return
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    if method == "forkserver":
        forkserver.ensure_running()


def _make_dataset(plan: Plan, probe: ds.Probe | None, epoch_file: str | None) -> Any:
    probe_path = probe.path if probe else None
    if plan.dataset == "iter":
        return ds.ShardedIterable(plan.shards, plan.faults, probe=probe_path)
    return ds.MapData(plan.n, plan.faults, probe=probe_path, epoch_file=epoch_file)


def _event(epoch: int, kind: str, start: float, value: Any = None, **extra: Any) -> dict[str, Any]:
    now = time.monotonic()
    ev = {"epoch": epoch, "kind": kind, "t": now, "dt": now - start, "value": value, **extra}
    send_note(ev)
    return ev


def _next(it: Any, epoch: int, plan: Plan) -> dict[str, Any]:
    start = time.monotonic()
    try:
        batch = next(it)
    except StopIteration:
        return _event(epoch, "stop", start)
    except Exception as exc:
        return _event(
            epoch, "error", start, f"{type(exc).__name__}: {exc}", type=type(exc).__name__
        )
    value = tagged(batch) if plan.epoch_tag else flat(batch)
    return _event(epoch, "batch", start, value)


def drive(loader_cls: type, plan: Plan) -> dict[str, Any]:
    """Run ``plan`` against ``loader_cls``; returns figures and leaks (events went as notes)."""
    old_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    if plan.nofile is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (plan.nofile, old_nofile[1]))
    _start_mp_helpers(plan.kwargs.get("multiprocessing_context"))
    probe = ds.Probe() if plan.probe else None
    watch = Watch()  # after the probe: its fds are the scenario's, not the loader's
    tmp = tempfile.mkdtemp(prefix="loaderspec-epoch-")
    epoch_file = os.path.join(tmp, "epoch") if plan.epoch_tag else None
    if epoch_file:
        with open(epoch_file, "w") as f:
            f.write("0")
    loader = loader_cls(_make_dataset(plan, probe, epoch_file), **plan.kwargs)
    result: dict[str, Any] = {"len": None, "drop_s": {}, "killed": [], "alive_after_drop": {}}
    # Dropping the iterator must stop its workers unless they belong to the loader (persistent
    # workers; loaders that keep their iterator declare workers_die_with = "loader").
    iterator_owns_workers = not plan.kwargs.get("persistent_workers") and (
        getattr(loader_cls, "workers_die_with", "iterator") == "iterator"
    )
    if plan.len_of_loader:
        try:
            result["len"] = len(loader)
        except TypeError as exc:
            result["len"] = f"TypeError: {exc}"
    for epoch in range(plan.epochs):
        if epoch_file:
            with open(epoch_file, "w") as f:
                f.write(str(epoch))
        how, k = plan.stop_after.get(epoch, ("", -1))
        if how in ("break", "raise"):
            result["drop_s"][epoch] = _loop_and_leave(loader, epoch, how, k, plan, probe)
            if iterator_owns_workers:
                result["alive_after_drop"][epoch] = _alive_after(watch, LEAK_GRACE_S)
            continue
        start = time.monotonic()
        try:
            it = iter(loader)
        except Exception as exc:
            # Raising at iter() (e.g. a worker_init_fn error surfaced while starting workers)
            # is the loader's error for this epoch, not the scenario's.
            _event(epoch, "error", start, f"{type(exc).__name__}: {exc}", type="iter")
            continue
        errors = taken = 0
        for _ in range(plan.max_events):
            start = time.monotonic()
            try:
                if plan.kill_worker_after is not None and taken == plan.kill_worker_after:
                    plan.kill_worker_after = None
                    result["killed"] = _kill_one_worker(watch, probe, plan.wait_fetch)
                if how == "drop" and taken == k:
                    break
                ev = _next(it, epoch, plan)
                watch.note_workers()
            except Exception as exc:
                # Raised between next() calls: torch's SIGCHLD handler raises the worker-death
                # error in the main thread wherever it happens to be.
                ev = _event(epoch, "error", start, f"{type(exc).__name__}: {exc}", type="async")
            if ev["kind"] == "stop":
                break
            if ev["kind"] == "error":
                errors += 1
                if errors > plan.max_errors:
                    break
            else:
                taken += 1
        if how == "drop" and plan.wait_fetch is not None and probe is not None:
            probe.wait_for(1, LEAK_GRACE_S, event="fetch", index=plan.wait_fetch)
        start = time.monotonic()
        try:
            del it
        except Exception as exc:  # a late asynchronous worker-death error, see above
            _event(epoch, "error", start, f"{type(exc).__name__}: {exc}", type="async")
        result["drop_s"][epoch] = time.monotonic() - start
        _event(epoch, "dropped", start)
        if how == "drop" and iterator_owns_workers:
            result["alive_after_drop"][epoch] = _alive_after(watch, LEAK_GRACE_S)
    resource.setrlimit(resource.RLIMIT_NOFILE, old_nofile)  # the leak check needs fds itself
    start = time.monotonic()
    del loader
    gc.collect()
    result["loader_drop_s"] = time.monotonic() - start
    leaks = watch.leaks(LEAK_GRACE_S)
    watch.kill_leftovers()
    result["leaks"] = leaks.describe() if leaks.any() else ""
    result["gone_after_s"] = leaks.gone_after_s
    if probe is not None:
        result["records"] = probe.drain()
        probe.close()
    return result


def _alive_after(watch: Watch, grace_s: float) -> list[int]:
    """Pids of workers still alive ``grace_s`` after the iterator was dropped (bounded wait)."""
    import psutil

    from conformance._watch import workers

    _, alive = psutil.wait_procs(workers(), timeout=grace_s)
    return [p.pid for p in alive]


def _loop_and_leave(
    loader: Any, epoch: int, how: str, k: int, plan: Plan, probe: ds.Probe | None
) -> float:
    """``for`` over the loader and leave after ``k`` batches by ``break`` or by raising; returns
    how long leaving took (the iterator's shutdown runs when the loop lets go of it)."""
    start = time.monotonic()
    try:
        for i, batch in enumerate(loader):
            _event(epoch, "batch", start, tagged(batch) if plan.epoch_tag else flat(batch))
            if i + 1 >= k:
                if plan.wait_fetch is not None and probe is not None:
                    probe.wait_for(1, LEAK_GRACE_S, event="fetch", index=plan.wait_fetch)
                start = time.monotonic()
                if how == "raise":
                    raise _Boom
                break
            start = time.monotonic()
    except _Boom:
        pass
    elapsed = time.monotonic() - start
    _event(epoch, "dropped", start)
    return elapsed


def _kill_one_worker(watch: Watch, probe: ds.Probe | None, wait_index: int | None) -> list[int]:
    """SIGKILL one live worker (the lowest pid), found as a psutil child, never via the loader."""
    if wait_index is not None and probe is not None:
        probe.wait_for(1, LEAK_GRACE_S, event="fetched", index=wait_index)
    pids = sorted(watch.note_workers())
    if not pids:
        return []
    os.kill(pids[0], signal.SIGKILL)
    send_note({"kind": "killed", "pid": pids[0], "t": time.monotonic()})
    return [pids[0]]


def parent_killed(loader_cls: type, state: str, kwargs: dict[str, Any]) -> None:
    """Bring the workers to ``state`` ("idle", "busy", "blocked"), send their pids, then SIGKILL
    this process (the loader's process). Never returns."""
    probe = ds.Probe()
    watch = Watch()
    n = 8
    if state == "busy":
        # Every fetch takes a minute: the workers are inside __getitem__ when the parent dies.
        faults: tuple[ds.Fault, ...] = (ds.Fault("sleep", ds.EVERY, 60.0),)
    elif state == "blocked":
        faults = (ds.Fault("big", ds.EVERY),)
    else:
        faults = ()
    loader = loader_cls(ds.MapData(n, faults, probe=probe.path), **kwargs)
    it = iter(loader)
    workers = kwargs.get("num_workers", 1)
    if state == "idle":
        for _ in range(n):  # consume everything but keep the iterator: workers wait for work
            next(it)
        reached = True
    elif state == "busy":
        reached = probe.wait_for(workers, LEAK_GRACE_S, event="fetch")
    else:
        # Blocked: every worker has fetched a big item and is writing it; nobody reads.
        reached = probe.wait_for(workers, LEAK_GRACE_S, event="fetched")
    send_note({"kind": "pids", "pids": watch.note_workers(), "reached": reached})
    kill_self()
    del it  # not reached


def stopiteration_sticks(loader_cls: type, kwargs: dict[str, Any], n: int) -> dict[str, Any]:
    """Exhaust an iterator, then call next() on it again (and with persistent workers, again
    after a new epoch started)."""
    watch = Watch()
    loader = loader_cls(ds.MapData(n), **kwargs)
    it = iter(loader)
    got = [flat(b) for b in it]
    after = []
    for _ in range(3):
        start = time.monotonic()
        try:
            after.append(("batch", flat(next(it))))
        except StopIteration:
            after.append(("stop", time.monotonic() - start))
        except Exception as exc:
            after.append(("error", f"{type(exc).__name__}: {exc}"))
    del it, loader
    leaks = watch.leaks(LEAK_GRACE_S)
    watch.kill_leftovers()
    return {"got": got, "after": after, "leaks": leaks.describe() if leaks.any() else ""}


def worker_info(loader_cls: type, kwargs: dict[str, Any], epochs: int) -> dict[str, Any]:
    """Record get_worker_info() and seeds from worker_init_fn, over ``epochs`` epochs."""
    probe = ds.Probe()
    watch = Watch()
    loader = loader_cls(
        ds.MapData(12, probe=probe.path), worker_init_fn=ds.InfoInit(probe.path), **kwargs
    )
    per_epoch = []
    for _ in range(epochs):
        got = [flat(b) for b in loader]
        per_epoch.append(got)
    records = probe.drain()
    del loader
    leaks = watch.leaks(LEAK_GRACE_S)
    watch.kill_leftovers()
    probe.close()
    return {
        "epochs": per_epoch,
        "records": records,
        "leaks": leaks.describe() if leaks.any() else "",
    }


def prefetch_window(loader_cls: type, kwargs: dict[str, Any], n: int, steps: int) -> dict[str, Any]:
    """Consume ``steps`` batches of size 1; after each, give the workers up to 0.2 s to fetch past
    the window (a violation is seen the moment it happens; a correct loader just lets the wait
    run out). Returns, per step, how many distinct indices had been fetched."""
    probe = ds.Probe()
    watch = Watch()
    workers = kwargs["num_workers"]
    window = kwargs.get("prefetch_factor", 2) * workers
    loader = loader_cls(ds.MapData(n, probe=probe.path), batch_size=1, **kwargs)
    it = iter(loader)
    seen = []
    for step in range(1, steps + 1):
        next(it)
        probe.wait_for(step + window + 1, 0.2, event="fetch")
        fetched = {r["index"] for r in probe.drain() if r["event"] == "fetch"}
        seen.append({"consumed": step, "fetched": len(fetched), "window": window})
        send_note({"epoch": 0, "kind": "step", "value": seen[-1]})
    del it, loader
    leaks = watch.leaks(LEAK_GRACE_S)
    watch.kill_leftovers()
    probe.close()
    return {"steps": seen, "leaks": leaks.describe() if leaks.any() else ""}


def accelerator() -> str | None:
    """Why pinning cannot be checked here (None: it can). Prefers loaderspec.fakeaccel, a
    genuine pinning backend without CUDA, then CUDA."""
    try:
        from loaderspec import fakeaccel  # type: ignore[attr-defined]
    except ImportError:
        fakeaccel = None
    if fakeaccel is not None and fakeaccel.available():
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return "no accelerator: neither loaderspec.fakeaccel nor CUDA is available to pin memory"


def pinned(loader_cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Iterate with pin_memory=True (fakeaccel loaded in this child where present), break after
    2 batches of a 6-batch epoch; report whether each batch was pinned and what was left."""
    try:
        from loaderspec import fakeaccel  # type: ignore[attr-defined]

        fakeaccel.load()
    except ImportError:
        pass
    watch = Watch()
    loader = loader_cls(ds.MapData(12), batch_size=2, pin_memory=True, **kwargs)
    flags = []
    start = time.monotonic()
    for i, batch in enumerate(loader):
        flags.append(bool(batch.is_pinned()))
        if i == 1:
            start = time.monotonic()
            break
    drop_s = time.monotonic() - start
    del loader
    leaks = watch.leaks(LEAK_GRACE_S)
    watch.kill_leftovers()
    return {"pinned": flags, "drop_s": drop_s, "leaks": leaks.describe() if leaks.any() else ""}
