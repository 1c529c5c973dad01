"""Drive any loader through a plan of the user's moves, in a sandbox, and say what the user saw.

A `Plan` is plain data: the faulty dataset (its length or shards, its faults), the loader's
constructor arguments (torch's `DataLoader` arguments), and how the user iterates (epochs;
leaving an epoch early by `del`, `break`, an exception in the loop, or the loader's process being
SIGKILLed; one worker SIGKILLed from outside; `next()` after StopIteration). `run(loader, plan)`
plays it in a `faultinject.sandbox` child and returns a `Run`: the sandbox's report (outcome,
leaks, orphans) and one event per step, streamed as it happens (`sandbox.note`), so a loader that
hangs still leaves its record. A conformance case, a spec-generated scenario and a bench figure
differ only in the plan they hand it and what they read off the `Run`; grading is not this
module's job.

The driver touches the loader only through its constructor, `iter`, `next`, `del`, `break` and
`len`; workers are psutil children of the loader's process, never a loader's attributes. Faults
go where they fire: in the dataset, in a `faultinject.collate` wrapped around the user's
collate_fn (`point="in_collate"`), in a `faultinject.worker_init` (`point="in_worker_init"`).
SIGCHLD is held back outside `iter()` and `next()` (torch's handler raises its worker-death error
wherever the main thread is; `processes.sigchld_deferred`), so a death surfaces in the call the
user would see it in.

A loader that cannot express the plan's configuration (`faultinject.loaders.unsupported`, or a
constructor raising `NotImplementedError` or rejecting one of torch's arguments) is not run: the
`Run` says `refused` and why.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from faultinject import loaders, processes, records, sandbox
from faultinject.faults import COLLATE_POINTS, Fault, Raise
from faultinject.limits import nofile
from faultinject.sandbox import SandboxReport

__all__ = [
    "MUST_BOUND_S",
    "Await",
    "Leave",
    "Plan",
    "Run",
    "describe",
    "drive",
    "flat",
    "run",
]

# How long the driver waits for what a correct loader does at once (workers gone after a drop, a
# fetch to start): the suite's MUST bound, 3 x torch's 5 s status-check interval.
MUST_BOUND_S = 15.0
# How long after iter() a plan that kills the loader's process before any next() waits for a
# first fetch before it makes the first next() itself (workers started lazily, see `lazy_start`).
LAZY_START_S = 1.0
# A constructor that rejects one of torch's arguments (TypeError's own wording, both spellings).
_UNEXPECTED = re.compile(r"unexpected keyword argument '?(\w+)'?")


@dataclass(frozen=True)
class Leave:
    """The user leaves an epoch after `after` batches (`counting="calls"`: `next()` calls, errors
    included): `"drop"` (`del it`), `"break"` or `"raise"` (out of a `for` loop), or
    `"kill_parent"` (the loader's process is SIGKILLed: `sandbox.kill_self()`)."""

    how: Literal["drop", "break", "raise", "kill_parent"]
    after: int
    counting: Literal["batches", "calls"] = "batches"


@dataclass(frozen=True)
class Await:
    """Wait (bounded by `timeout_s`) until `count` fetch records of `event` (`"fetch"`: started,
    `"fetched"`: made, `"fault"`: a fault about to fire) of item `index` (None: any) exist."""

    event: Literal["fetch", "fetched", "fault"] = "fetch"
    index: int | None = None
    count: int = 1
    timeout_s: float = MUST_BOUND_S


@dataclass(frozen=True)
class Plan:
    """What the user does with a loader. Picklable (it travels to the sandbox child).

    The dataset is `FaultyDataset(n, faults)` (items: the index; `item(index)` if given), or
    `FaultyIterable(shards, faults)` when `shards` is set; every fetch takes `cost_s`. With
    `tag_epochs` every item is `[index, epoch it was dispatched in]` (an `EpochSampler` is passed
    as the loader's `sampler`). `kwargs` are the loader's constructor arguments. `leave`
    maps an epoch to how the user leaves it early; `before_leave` is awaited first.
    `kill_worker_after`: after that many batches of epoch 0, SIGKILL the live worker with the
    lowest pid (after `before_kill`). `kill_worker_before_epoch`: the same kill between epochs,
    before that epoch's `iter()` (persistent workers sitting idle).
    An epoch ends at StopIteration, at a leave, after `max_errors + 1` errors, at the first of
    the loader's own fatal errors with `stop_at_fatal` (a RuntimeError naming the DataLoader: a
    worker death or a timeout), or `calls_after_error` calls after its first error.
    `calls_after_stop`: `next()` calls after StopIteration. `pause_s`: after each batch, wait up
    to that long for fetches beyond the prefetch window (an event `paused` counts them).
    `fd_headroom`: the file descriptors the loader's process may still open (RLIMIT_NOFILE is
    set that far above those open when the loader is built, whatever the harness inherited).
    `setup` / `teardown`: module-level callables run in the child before the loader is built /
    after it was dropped (an accelerator, a tracer). `loaders`: build, iterate and drop that many
    loaders one after the other (epochs are numbered on across them; each `loader_dropped` event
    says how many fds the process then had open). `render`: a batch event's value is the batch
    `flat` (plain values) or as its `structure` (`describe`: types and nesting kept).
    """

    n: int = 8
    shards: tuple[int, ...] | None = None
    faults: tuple[Fault, ...] = ()
    item: Callable[[int], Any] | None = None
    cost_s: float = 0.0
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    epochs: int = 1
    leave: Mapping[int, Leave] = field(default_factory=dict)
    before_leave: Await | None = None
    kill_worker_after: int | None = None
    before_kill: Await | None = None
    kill_worker_before_epoch: int | None = None
    max_errors: int = 0
    stop_at_fatal: bool = False
    calls_after_error: int | None = None
    calls_after_stop: int = 0
    max_events: int = 10_000
    pause_s: float = 0.0
    tag_epochs: bool = False
    records: bool = False
    record_inits: bool = False
    fd_headroom: int | None = None
    len_of_loader: bool = False
    in_thread: bool = False
    setup: Callable[[], Any] | None = None
    teardown: Callable[[], Any] | None = None
    loaders: int = 1
    render: Literal["flat", "structure"] = "flat"

    def argument_names(self) -> set[str]:
        """The names of the loader's constructor arguments the driver passes: `kwargs`, and what
        the plan adds (a collate_fn or worker_init_fn carrying faults, an `EpochSampler`)."""
        names = set(self.kwargs)
        points = {getattr(f, "point", None) for f in self.faults}
        if "in_collate" in points:
            names.add("collate_fn")
        if "in_worker_init" in points or self.record_inits:
            names.add("worker_init_fn")
        if self.tag_epochs:
            names.add("sampler")
        return names

    @property
    def uses_records(self) -> bool:
        """Whether the dataset writes fetch records (something waits on them, or asks)."""
        return bool(
            self.records or self.before_leave or self.before_kill or self.pause_s or self.tag_epochs
        )


# --------------------------------------------------------------------------- what the user saw


def flat(batch: Any) -> list[Any]:
    """A batch as a flat list of plain values (tensors and arrays as numbers; bytes as their
    length, so a big item does not travel back; anything else as its repr)."""
    if hasattr(batch, "tolist"):
        batch = batch.tolist()
    if isinstance(batch, list | tuple):
        items: list[Any] = []
        for x in batch:
            items.extend(flat(x))
        return items
    if isinstance(batch, bytes | bytearray):
        return [f"<{len(batch)} bytes>"]
    if batch is None or isinstance(batch, int | float | str | bool):
        return [batch]
    return [repr(batch)]


def describe(batch: Any) -> Any:
    """A batch as plain data that keeps its structure and types: a tensor as `{"tensor": values,
    "dtype": name}`, a tuple as `{"tuple": [...]}`, a dict as `{"dict": [[key, value], ...]}` (keys
    sorted), a list as a list, bytes as their length; plain values as they are, anything else as
    its type name and repr. Two batches are the same batch when their descriptions are equal."""
    if isinstance(batch, torch_tensor_type()):
        return {"tensor": batch.tolist(), "dtype": str(batch.dtype).removeprefix("torch.")}
    if isinstance(batch, tuple):
        return {"tuple": [describe(x) for x in batch]}
    if isinstance(batch, list):
        return [describe(x) for x in batch]
    if isinstance(batch, Mapping):
        return {"dict": [[k, describe(batch[k])] for k in sorted(batch, key=repr)]}
    if isinstance(batch, bytes | bytearray):
        return f"<{len(batch)} bytes>"
    if batch is None or isinstance(batch, int | float | str | bool):
        return batch
    return {type(batch).__name__: repr(batch)}


def torch_tensor_type() -> type:
    """`torch.Tensor`, imported on first use (the driver itself does not need torch)."""
    import torch

    return torch.Tensor


def _tagged(batch: Any) -> list[tuple[int, int]]:
    """A batch of `[index, epoch]` items (collated as two columns) as (index, epoch) pairs."""
    index, epoch = batch
    return list(zip(flat(index), flat(epoch), strict=True))


def _fatal(exc: BaseException) -> bool:
    """The loader's own failure (a worker death, a timeout): the iterator is done."""
    return isinstance(exc, RuntimeError) and "DataLoader" in str(exc)


class _Boom(Exception):
    """The user's own exception, raised inside the for loop."""


class _NoHold:
    """`sigchld_deferred()`'s stand-in off the main thread (signals go to the main thread)."""

    @contextlib.contextmanager
    def released(self) -> Iterator[None]:
        yield


class _Loop:
    """What a user's `for batch in loader` iterates: `iter(loader)`, with SIGCHLD let through
    only inside `iter()` and `next()`. Only the `for` statement holds it, so leaving the loop
    (break, an exception) drops the loader's iterator as a user's loop does."""

    def __init__(self, loader: Any, held: Any) -> None:
        self.held = held
        with held.released():
            self.it = iter(loader)

    def __iter__(self) -> _Loop:
        return self

    def __next__(self) -> Any:
        with self.held.released():
            return next(self.it)


def _start_mp_helpers(method: Any) -> None:
    """Start the helpers spawn/forkserver keep for the process's whole life (resource tracker,
    forkserver) before the leak baseline: their pipes are not the loader's."""
    if method not in ("spawn", "forkserver"):
        return
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    if method == "forkserver":
        forkserver.ensure_running()


def _workers() -> list[int]:
    """Pids of the live processes this process started (multiprocessing's helpers aside)."""
    return [p.pid for p in processes.children(helpers=False)]


# --------------------------------------------------------------------------- the child side


class _Driver:
    """One plan, played in the sandbox child."""

    def __init__(
        self,
        loader_cls: type,
        plan: Plan,
        record_dir: str | None,
        linger_by_type: Mapping[str, float] | None = None,
    ) -> None:
        self.cls = loader_cls
        self.plan = plan
        self.linger_by_type = dict(linger_by_type or {})
        self.record_dir = record_dir if plan.uses_records or plan.record_inits else None
        self.watch: records.RecordWatch | None = None
        self.held: Any = _NoHold()
        self.epoch_file = None if record_dir is None else os.path.join(record_dir, "epoch")
        self.worker_killed = False

    # ---- events

    def event(
        self, epoch: int | None, kind: str, start: float, value: Any = None, **extra: Any
    ) -> dict:
        """Note one event to the harness (`epoch` None: the loader's, not an epoch's)."""
        now = time.monotonic()
        ev = {"epoch": epoch, "kind": kind, "t": now, "dt": now - start, "value": value, **extra}
        sandbox.note(ev)
        return ev

    def error(self, epoch: int | None, start: float, exc: BaseException, **extra: Any) -> dict:
        text = f"{type(exc).__name__}: {exc}"
        kind = type(exc).__name__
        return self.event(epoch, "error", start, text, type=kind, fatal=_fatal(exc), **extra)

    # ---- building

    def dataset(self) -> Any:
        from faultinject.datasets import EpochIndexed, FaultyDataset, FaultyIterable

        plan = self.plan
        mine = tuple(f for f in plan.faults if getattr(f, "point", None) != "in_worker_init")
        common: dict[str, Any] = {"cost_s": plan.cost_s, "record_dir": self.record_dir}
        if plan.shards is not None:
            return FaultyIterable(plan.shards, mine, **common)
        if plan.tag_epochs:
            # Index epoch * n + i is item i dispatched in that epoch (EpochSampler).
            epochs = plan.epochs * plan.loaders
            return FaultyDataset(plan.n * epochs, mine, item=EpochIndexed(plan.n), **common)
        if plan.item is not None:
            common["item"] = plan.item
        return FaultyDataset(plan.n, mine, **common)

    def kwargs(self) -> dict[str, Any]:
        """The loader's arguments, with the faults that fire in collate or worker_init put in
        wrappers around the user's own functions."""
        from faultinject import collate, worker_init
        from faultinject.datasets import EpochSampler

        out = dict(self.plan.kwargs)
        if self.plan.tag_epochs and self.epoch_file is not None:
            out["sampler"] = EpochSampler(self.plan.n, self.epoch_file)
        in_collate = [f for f in self.plan.faults if getattr(f, "point", None) in COLLATE_POINTS]
        if in_collate:
            out["collate_fn"] = collate(*in_collate, base=out.get("collate_fn"))
        in_init = [
            f for f in self.plan.faults if isinstance(f, Raise) and f.point == "in_worker_init"
        ]
        if in_init or self.plan.record_inits:
            out["worker_init_fn"] = worker_init(
                *in_init,
                record_dir=self.record_dir if self.plan.record_inits else None,
                then=out.get("worker_init_fn"),
            )
        return out

    def construct(self) -> Any:
        """The loader, or None when its constructor refused the configuration (noted)."""
        start = time.monotonic()
        try:
            loader = self.cls(self.dataset(), **self.kwargs())
        except NotImplementedError as exc:
            reason = str(exc) or f"{type(exc).__name__} from the constructor"
        except TypeError as exc:
            # Python's own words for a keyword the constructor does not take, naming one the
            # plan passed; any other TypeError is the loader's error, not a refusal.
            unexpected = _UNEXPECTED.search(str(exc))
            if unexpected is None or unexpected.group(1) not in self.plan.argument_names():
                raise
            reason = loaders.MSG_UNSUPPORTED_ARG.format(name=unexpected.group(1))
        else:
            self.built(loader, start)
            return loader
        self.event(None, "refused", start, reason)
        return None

    def built(self, loader: Any, start: float) -> None:
        """Note the type of what the constructor returned (a factory may build another class),
        and take the leak wait the harness chose for that type, if any."""
        ref = f"{type(loader).__module__}:{type(loader).__qualname__}"
        linger = self.linger_by_type.get(ref)
        if linger is not None:
            sandbox.set_linger(linger)
        self.event(None, "built", start, ref, linger_s=linger)

    # ---- waiting and outside faults

    def awaited(self, epoch: int, condition: Await | None) -> None:
        if condition is None or self.watch is None:
            return
        start = time.monotonic()
        ok = self.watch.wait_count(
            condition.count, condition.timeout_s, event=condition.event, index=condition.index
        )
        self.event(epoch, "awaited", start, ok)

    def lazy_start(self, it: Any) -> None:
        """A loader that starts its workers at the first next() (SPDL's, grain's) has fetched
        nothing after iter(): if no fetch began within `LAZY_START_S`, make that next() in a
        daemon thread (it blocks, as the user's would), so the workers reach the state the plan
        awaits before the loader's process is killed."""
        if self.watch is None or self.watch.wait_count(1, LAZY_START_S):
            return

        def first_next() -> None:
            with contextlib.suppress(Exception):
                next(it)

        threading.Thread(target=first_next, name="faultinject-first-next", daemon=True).start()

    def kill_one_worker(self, epoch: int) -> None:
        """SIGKILL the live worker with the lowest pid, found as a psutil child, and wait
        (bounded, not reaping) until it has exited: the user's next call comes after the death,
        not while the process is still on its way out."""
        self.worker_killed = True
        self.awaited(epoch, self.plan.before_kill)
        pids = sorted(_workers())
        if pids:
            processes.kill(pids[:1], signal.SIGKILL)
            processes.wait_gone(pids[:1], MUST_BOUND_S)
        self.event(epoch, "killed", time.monotonic(), pids[:1])

    def alive_after_drop(self, epoch: int) -> None:
        """Note the workers still alive `MUST_BOUND_S` after the iterator was dropped (only
        when dropping the iterator must stop them)."""
        if self.plan.kwargs.get("persistent_workers"):
            return
        if loaders.workers_die_with(self.cls) != "iterator":
            return
        start = time.monotonic()
        self.event(epoch, "alive_after_drop", start, processes.wait_gone(_workers(), MUST_BOUND_S))

    # ---- one next()

    def next(self, it: Any, epoch: int) -> dict:
        start = time.monotonic()
        try:
            with self.held.released():
                batch = next(it)
        except StopIteration:
            return self.event(epoch, "stop", start)
        except Exception as exc:
            return self.error(epoch, start, exc)
        return self.batch(epoch, start, batch)

    def batch(self, epoch: int, start: float, batch: Any) -> dict:
        if self.plan.tag_epochs:
            value: Any = _tagged(batch)
        elif self.plan.render == "structure":
            value = describe(batch)
        else:
            value = flat(batch)
        extra = {}
        if callable(getattr(batch, "is_pinned", None)):
            extra["pinned"] = bool(batch.is_pinned())
        return self.event(epoch, "batch", start, value, **extra)

    def pause(self, epoch: int, taken: int) -> None:
        """Give the workers up to `pause_s` to fetch past the window (a violation shows the
        moment it happens; a correct loader lets the wait run out); note how many items were
        fetched by then."""
        if not self.plan.pause_s or self.watch is None:
            return
        workers = int(self.plan.kwargs.get("num_workers", 0))
        window = int(self.plan.kwargs.get("prefetch_factor") or 2) * workers
        start = time.monotonic()
        self.watch.wait_count(taken + window + 1, self.plan.pause_s)
        fetched = len({f.index for f in records.read_fetches(self.record_dir or "")})
        self.event(epoch, "paused", start, fetched, consumed=taken, window=window)

    # ---- epochs

    def leave_loop(self, loader: Any, epoch: int, leave: Leave) -> None:
        """`for` over the loader and leave after `leave.after` batches by `break` or by
        raising; the `dropped` event times the leaving (the iterator's shutdown runs when the
        loop lets go of it)."""
        start = time.monotonic()
        try:
            for i, batch in enumerate(_Loop(loader, self.held)):
                self.batch(epoch, start, batch)
                if i + 1 >= leave.after:
                    self.awaited(epoch, self.plan.before_leave)
                    start = time.monotonic()
                    if leave.how == "raise":
                        raise _Boom
                    break
                start = time.monotonic()
        except _Boom:
            pass
        except Exception as exc:  # the loader's own error ends the loop, as in a user's script
            self.error(epoch, start, exc)
            start = time.monotonic()
        self.event(epoch, "dropped", start)

    def epoch(self, loader: Any, epoch: int) -> None:
        plan = self.plan
        leave = plan.leave.get(epoch)
        if self.epoch_file is not None:
            with open(self.epoch_file, "w") as f:
                f.write(str(epoch))
        if epoch == plan.kill_worker_before_epoch and not self.worker_killed:
            self.kill_one_worker(epoch)
        if leave is not None and leave.how in ("break", "raise"):
            self.leave_loop(loader, epoch, leave)
            self.alive_after_drop(epoch)
            return
        start = time.monotonic()
        try:
            with self.held.released():
                it = iter(loader)
        except Exception as exc:  # e.g. a worker_init_fn error raised while starting workers
            self.error(epoch, start, exc, at="iter")
            return
        errors = taken = 0
        first_error: int | None = None  # the call that raised first
        for calls in range(plan.max_events):  # calls: next() calls made so far
            if epoch == 0 and taken == plan.kill_worker_after and not self.worker_killed:
                self.kill_one_worker(epoch)
            if leave is not None and leave.after == (
                taken if leave.counting == "batches" else calls
            ):
                if leave.how == "kill_parent" and calls == 0 and plan.before_leave:
                    self.lazy_start(it)
                self.awaited(epoch, plan.before_leave)
                if leave.how == "kill_parent":
                    self.event(epoch, "kill_parent", time.monotonic())
                    sandbox.kill_self()
                break
            ev = self.next(it, epoch)
            if ev["kind"] == "stop":
                for _ in range(plan.calls_after_stop):
                    self.next(it, epoch)
                break
            if ev["kind"] == "error":
                errors += 1
                first_error = calls if first_error is None else first_error
                if errors > plan.max_errors or (plan.stop_at_fatal and ev["fatal"]):
                    break
            else:
                taken += 1
                self.pause(epoch, taken)
            after_error = plan.calls_after_error
            if (
                first_error is not None
                and after_error is not None
                and calls - first_error >= after_error
            ):
                break
        start = time.monotonic()
        del it
        self.event(epoch, "dropped", start)
        if leave is not None and leave.how == "drop":
            self.alive_after_drop(epoch)

    def run(self) -> None:
        plan = self.plan
        if plan.setup is not None:
            plan.setup()
        _start_mp_helpers(plan.kwargs.get("multiprocessing_context"))
        loaders.start_process_helpers(self.cls)
        if self.record_dir is not None:
            self.watch = records.RecordWatch(self.record_dir)
        with contextlib.ExitStack() as stack:
            if threading.current_thread() is threading.main_thread():
                self.held = stack.enter_context(processes.sigchld_deferred())
                # Whatever the loader left pending is not delivered when the hold ends.
                stack.callback(signal.signal, signal.SIGCHLD, signal.SIG_DFL)
            self.play()
        if self.watch is not None:
            self.watch.close()
        if plan.teardown is not None:
            plan.teardown()

    def fd_limit(self) -> contextlib.AbstractContextManager[Any]:
        """RLIMIT_NOFILE `fd_headroom` above the fds open now (nothing without `fd_headroom`)."""
        if self.plan.fd_headroom is None:
            return contextlib.nullcontext()
        return nofile(len(os.listdir("/proc/self/fd")) + self.plan.fd_headroom)

    def play(self) -> None:
        plan = self.plan
        sandbox.mark_baseline()  # the set-up above (helpers, the record watch) is not a leak
        step = max(plan.epochs, 1)
        for first in range(0, plan.loaders * step, step):
            with self.fd_limit():
                loader = self.construct()
                if loader is None:
                    return
                if plan.len_of_loader:
                    start = time.monotonic()
                    try:
                        self.event(None, "len", start, len(loader))
                    except TypeError as exc:
                        self.error(None, start, exc, at="len")
                for epoch in range(first, first + plan.epochs):
                    self.epoch(loader, epoch)
            # Out of the fd limit: dropping the loader and the leak count need descriptors.
            start = time.monotonic()
            del loader
            gc.collect()
            self.event(None, "loader_dropped", start, fds=len(os.listdir("/proc/self/fd")))


def drive(
    loader: type | str,
    plan: Plan,
    record_dir: str | None = None,
    linger_by_type: Mapping[str, float] | None = None,
) -> None:
    """The sandbox target: play `plan` against `loader` (a class, or its `"pkg.mod:Class"`);
    the events go to the harness as notes. `record_dir`: where the dataset's records go;
    `linger_by_type`: the leak wait for loaders of these types (`"module:Class"` of what the
    constructor returned), instead of the run's."""
    cls = loaders.resolve(loader) if isinstance(loader, str) else loader
    driver = _Driver(cls, plan, record_dir, linger_by_type)
    if not plan.in_thread:
        driver.run()
        return
    failed: list[BaseException] = []

    def body() -> None:
        try:
            driver.run()
        except BaseException as exc:  # re-raised in the sandbox's main thread
            failed.append(exc)

    # PR_SET_PDEATHSIG follows the forking *thread*: a loader driven from another thread shows
    # how its workers learn of a parent death when that thread is not the main one.
    thread = threading.Thread(target=body, name="faultinject-driver")
    thread.start()
    thread.join()  # bounded by the sandbox's deadline (it kills the whole child)
    if failed:
        raise failed[0]


# --------------------------------------------------------------------------- the harness side


@dataclass
class Run:
    """A played plan: the sandbox's report, the events the driver streamed, and the records."""

    plan: Plan
    report: SandboxReport | None  # None: refused before anything started
    events: list[dict[str, Any]] = field(default_factory=list)
    fetches: list[records.Fetch] = field(default_factory=list)
    inits: list[records.WorkerInit] = field(default_factory=list)
    refused: str | None = None
    leak_note: str = ""  # why the leak wait was not the usual one (set by whoever chose it)

    def of(self, epoch: int | None = 0, kind: str | None = None) -> list[dict[str, Any]]:
        """Events of `epoch` (None: all, the loader's own included), of `kind` (None: all), in
        order."""
        return [e for e in self.events if epoch in (None, e["epoch"]) and kind in (None, e["kind"])]

    def calls(self, epoch: int = 0) -> list[dict[str, Any]]:
        """The results of `next()` in `epoch`: batch, error and stop events."""
        return [e for e in self.of(epoch) if e["kind"] in ("batch", "error", "stop")]

    def batches(self, epoch: int = 0) -> list[list[Any]]:
        return [e["value"] for e in self.of(epoch, "batch")]

    def items(self, epoch: int = 0) -> list[Any]:
        return [x for b in self.batches(epoch) for x in b]

    def last(self, epoch: int = 0) -> str:
        """The kind of the last event of `epoch` ("nothing" if none)."""
        evs = self.of(epoch)
        return evs[-1]["kind"] if evs else "nothing"

    def first(self, kind: str, epoch: int | None = 0) -> dict[str, Any] | None:
        found = self.of(epoch, kind)
        return found[0] if found else None


def _probe_dataset(plan: Plan) -> Any:
    """A dataset of the plan's shape (map-style or iterable, its length), without faults or
    records: what a loader's `loaderspec_unsupported` is shown before anything starts."""
    from faultinject.datasets import FaultyDataset, FaultyIterable

    return FaultyDataset(plan.n) if plan.shards is None else FaultyIterable(plan.shards)


def run(
    loader: type | str,
    plan: Plan,
    *,
    deadline_s: float,
    start: Literal["fork", "spawn"] = "fork",
    orphan_grace_s: float = 1.0,
    linger_s: float = MUST_BOUND_S,
    linger_by_type: Mapping[str, float] | None = None,
) -> Run:
    """Play `plan` against `loader` in a sandbox; never raises for anything the loader does.

    Args:
        loader: the loader class, or its `"pkg.mod:Class"` (needed with `start="spawn"`).
        plan: what the user does.
        deadline_s: the sandbox's bound on the whole scenario (`report.outcome == "deadline"`).
        start: the sandbox's start method.
        orphan_grace_s: how long workers left when the child ended may take to exit (a
            parent-death plan times their exits over it: `report.orphan_exit_s`).
        linger_s: how long the loader's processes may take to exit after the scenario ended.
        linger_by_type: `linger_s` for loaders of these types (`"module:Class"` of what the
            constructor returned: the `built` event's value).

    Raises:
        faultinject.sandbox.SandboxError: the sandbox could not start (e.g. a local class).
    """
    cls = loaders.resolve(loader) if isinstance(loader, str) else loader
    # The arguments the plan adds (a collate_fn carrying faults, a sampler) count too.
    added = dict.fromkeys(plan.argument_names() - set(plan.kwargs))
    why = loaders.unsupported(cls, {**added, **plan.kwargs}, dataset=_probe_dataset(plan))
    if why:
        return Run(plan, None, refused=why)
    record_dir = tempfile.mkdtemp(prefix="faultinject-run-")
    try:
        report = sandbox.run(
            drive,
            loader if start == "spawn" else cls,
            plan,
            record_dir,
            linger_by_type,
            deadline_s=deadline_s,
            start=start,
            orphan_grace_s=orphan_grace_s,
            linger_s=linger_s,
        )
        events = [n for n in report.notes if isinstance(n, dict) and "kind" in n]
        refused = next((e["value"] for e in events if e["kind"] == "refused"), None)
        out = Run(plan, report, events, refused=refused)
        out.fetches = records.read_fetches(record_dir, faults=True, fetched=True)
        out.inits = records.read_inits(record_dir)
        return out
    finally:
        shutil.rmtree(record_dir, ignore_errors=True)
