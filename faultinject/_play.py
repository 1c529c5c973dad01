"""The child side: play a `Plan` against a loader inside the sandbox child, noting each step.

`drive(loader, plan, ...)` is the sandbox's target. It touches the loader only through its
constructor, `iter`, `next`, `del`, `break` and `len`; workers are psutil children of the
loader's process, never a loader's attributes. Faults go where they fire: in the dataset, in a
`faultinject.collate` wrapped around the user's collate_fn (`point="in_collate"`), in a
`faultinject.worker_init` (`point="in_worker_init"`). SIGCHLD is held back outside `iter()` and
`next()` (torch's handler raises its worker-death error wherever the main thread is;
`processes.sigchld_deferred`), so a death surfaces in the call the user would see it in. Each
step is one `faultinject.events` event, streamed to the harness as it happens
(`sandbox.note`), so a loader that hangs still leaves its record. Grades nothing.

A loader constructor raising `NotImplementedError` or rejecting one of torch's arguments is a
`Refused` event: nothing runs.

`Driver` is the one driver of every kind of plan: a rank group's ranks (`faultinject.ranks`) and
a resume scenario's segments (`faultinject.resume`) subclass it, keeping its construction, its
`next()` loop (`Driver.calls`) and its events, and add their own moves through its hooks
(`dataset`, `kwargs`, `before_next`, `after_batch`, `max_errors`); `rank` and `seg` go on every
event they note.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from loaderspec.faultinject import _child, loaders, processes, records, sandbox
from loaderspec.faultinject.events import (
    AliveAfterDrop,
    AliveAfterError,
    Awaited,
    Batch,
    Built,
    Call,
    Dropped,
    Error,
    Event,
    Killed,
    KillParent,
    Len,
    LoaderDropped,
    Paused,
    Refused,
    Stop,
)
from loaderspec.faultinject.faults import COLLATE_POINTS, Die, Raise
from loaderspec.faultinject.limits import nofile
from loaderspec.faultinject.plan import MUST_BOUND_S, Await, Leave, Plan

if TYPE_CHECKING:
    import torch

E = TypeVar("E", bound=Event)

__all__ = ["Driver", "Played", "describe", "drive", "flat"]

# How long after iter() a plan that kills the loader's process before any next() waits for a
# first fetch before it makes the first next() itself (workers started lazily, see `lazy_start`).
LAZY_START_S = 1.0
# How long, at most, the threads a dropped loader started get to end before its fd count.
SETTLE_S = 1.0
# A constructor that rejects one of torch's arguments (TypeError's own wording, both spellings).
_UNEXPECTED = re.compile(r"unexpected keyword argument '?(\w+)'?")


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


def torch_tensor_type() -> type[torch.Tensor]:
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


class Played(NamedTuple):
    """How an epoch's `next()` calls ended: `last`, the last call's event (None: the plan's
    own move ended the epoch), after `calls` calls, `taken` batches and `errors` errors."""

    last: Call | None
    calls: int
    taken: int
    errors: int


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


class Driver:
    """One plan, played in the sandbox child: the loader built, iterated and dropped, each step
    noted. A rank group's ranks and a resume scenario's segments drive their loaders with it
    (`faultinject.ranks`, `faultinject.resume`)."""

    # How much of an error's text an event keeps (None: all of it).
    text_limit: int | None = None

    def __init__(
        self,
        loader_cls: type,
        plan: Plan,
        record_dir: str | None,
        linger_by_type: Mapping[str, float] | None = None,
    ) -> None:
        self.cls = loader_cls
        self.plan = plan
        self.rank: int | None = None  # the rank whose loader this drives (a rank group)
        self.seg: int | None = None  # the segment being played (a resume scenario)
        self.send: Callable[[Event], None] = sandbox.note  # where the events go
        self.linger_by_type = dict(linger_by_type or {})
        self.record_dir = record_dir if plan.uses_records or plan.record_inits else None
        self.watch: records.RecordWatch | None = None
        self.held: Any = _NoHold()
        self.epoch_file = None if record_dir is None else os.path.join(record_dir, "epoch")
        self.worker_killed = False
        self.it: Any = None  # the epoch's iterator
        self.kept = True  # whether the batches handed out now count (see `Batch.kept`)

    # ---- events

    def note(
        self,
        event: type[E],
        epoch: int | None,
        start: float,
        end: float | None = None,
        **fields: Any,
    ) -> E:
        """Note one event to the harness (`epoch` None: the loader's, not an epoch's) of this
        driver's rank and segment, timed from `start` to `end` (default: now). (`at` is a field
        of Error's: where it was raised.)"""
        now = time.monotonic() if end is None else end
        ev = event(epoch, now, now - start, rank=self.rank, seg=self.seg, **fields)
        self.send(ev)
        return ev

    def error(self, epoch: int | None, start: float, exc: BaseException, **extra: Any) -> Error:
        text = f"{type(exc).__name__}: {exc}"[: self.text_limit]
        return self.note(
            Error, epoch, start, text=text, type=type(exc).__name__, fatal=_fatal(exc), **extra
        )

    # ---- building

    def dataset(self) -> Any:
        from loaderspec.faultinject.datasets import EpochIndexed, FaultyDataset, FaultyIterable

        plan = self.plan
        mine = tuple(f for f in plan.faults if getattr(f, "point", None) != "in_worker_init")
        common: dict[str, Any] = {"cost_s": plan.cost_s, "record_dir": self.record_dir}
        common["state_dir"] = plan.once_dir
        if plan.shards is not None:
            return FaultyIterable(plan.shards, mine, **common)
        if plan.tag_epochs:
            # Index epoch * n + i is item i dispatched in that epoch (EpochSampler).
            epochs = plan.epochs * plan.loaders
            return FaultyDataset(plan.n * epochs, mine, item=EpochIndexed(plan.n), **common)
        if plan.item is not None:
            common["item"] = plan.item
        return FaultyDataset(plan.n, mine, **common)

    def kwargs(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The loader's arguments (`given`, else the plan's), with the faults that fire in
        collate or worker_init put in wrappers around the user's own functions."""
        from loaderspec.faultinject._collate import collate
        from loaderspec.faultinject._worker_init import worker_init
        from loaderspec.faultinject.datasets import EpochSampler

        out = dict(self.plan.kwargs if given is None else given)
        if self.plan.tag_epochs and self.epoch_file is not None:
            out["sampler"] = EpochSampler(self.plan.n, self.epoch_file)
        in_collate = [
            f
            for f in self.plan.faults
            if isinstance(f, Die | Raise) and getattr(f, "point", None) in COLLATE_POINTS
        ]
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
        self.note(Refused, None, start, reason=reason)
        return None

    def built(self, loader: Any, start: float) -> None:
        """Note the type of what the constructor returned (a factory may build another class),
        and take the leak wait the harness chose for that type, if any."""
        ref = f"{type(loader).__module__}:{type(loader).__qualname__}"
        linger = self.linger_by_type.get(ref)
        if linger is not None:
            sandbox.set_linger(linger)
        self.note(Built, None, start, ref=ref, linger_s=linger)

    # ---- waiting and outside faults

    def awaited(self, epoch: int, condition: Await | None) -> None:
        if condition is None or self.watch is None:
            return
        start = time.monotonic()
        ok = self.watch.wait_count(
            condition.count, condition.timeout_s, event=condition.event, index=condition.index
        )
        self.note(Awaited, epoch, start, ok=ok)

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
        self.note(Killed, epoch, time.monotonic(), pids=tuple(pids[:1]))

    def alive_after_drop(self, epoch: int) -> None:
        """Note the workers still alive `plan.drop_wait_s` (`MUST_BOUND_S` unless the harness
        knows the loader leaves them) after the iterator was dropped (only when dropping the
        iterator must stop them)."""
        if self.plan.kwargs.get("persistent_workers"):
            return
        if loaders.workers_die_with(self.cls) != "iterator":
            return
        start = time.monotonic()
        alive = tuple(processes.wait_gone(_workers(), self.plan.drop_wait_s))
        self.note(AliveAfterDrop, epoch, start, pids=alive)

    def alive_after_error(self, epoch: int) -> None:
        """Note the workers still alive `hold_after_error_s` after the epoch's error, with its
        iterator held: a loader that shuts down on a fatal error needs no drop to stop them."""
        start = time.monotonic()
        alive = tuple(processes.wait_gone(_workers(), self.plan.hold_after_error_s))
        self.note(AliveAfterError, epoch, start, pids=alive)

    # ---- one next()

    def next(self, it: Any, epoch: int, taken: int = 0, kept: bool = True) -> Call:
        """One `next()` after `taken` batches of `epoch`, noted (`kept`: see `Batch`)."""
        start = time.monotonic()
        try:
            with self.held.released():
                batch = next(it)
        except StopIteration:
            return self.note(Stop, epoch, start, after=taken)
        except Exception as exc:
            return self.error(epoch, start, exc, step=taken, kept=kept)
        return self.batch(epoch, start, batch, kept)

    def batch(self, epoch: int, start: float, batch: Any, kept: bool = True) -> Batch:
        if self.plan.tag_epochs:
            value: Any = _tagged(batch)
        elif self.plan.render == "structure":
            value = describe(batch)
        else:
            value = flat(batch)
        pinned = bool(batch.is_pinned()) if callable(getattr(batch, "is_pinned", None)) else None
        return self.note(Batch, epoch, start, value=value, pinned=pinned, kept=kept)

    def pause(self, epoch: int, taken: int) -> None:
        """Give the workers up to `pause_s` to fetch more than `pause_ahead` items past those
        consumed (a violation shows the moment it happens; a correct loader lets the wait run
        out); note how many items were fetched by then."""
        if not self.plan.pause_s or self.watch is None:
            return
        start = time.monotonic()
        self.watch.wait_count(taken + self.plan.pause_ahead + 1, self.plan.pause_s)
        fetched = len({f.index for f in records.read_fetches(self.record_dir or "")})
        self.note(Paused, epoch, start, fetched=fetched, consumed=taken)

    # ---- epochs

    def leave_loop(self, loader: Any, epoch: int, leave: Leave) -> Played:
        """`for` over the loader and leave after `leave.after` batches (or when `after_batch`
        ends the epoch) by `break` or by raising; the `dropped` event times the leaving (the
        iterator's shutdown runs when the loop lets go of it). A loop that ran out first notes
        its `Stop`; one the loader's own error ended notes the `Error` (`last`)."""
        start = time.monotonic()
        taken = 0
        last: Call | None = None
        try:
            for batch in _Loop(loader, self.held):
                taken += 1
                last = self.batch(epoch, start, batch, self.kept)
                if not self.after_batch(epoch, taken) or taken >= leave.after:
                    self.awaited(epoch, self.plan.before_leave)
                    start = time.monotonic()
                    if leave.how == "raise":
                        raise _Boom
                    break
                start = time.monotonic()
            else:
                last = self.note(Stop, epoch, start, after=taken)
                start = time.monotonic()
        except _Boom:
            pass
        except Exception as exc:  # the loader's own error ends the loop, as in a user's script
            last = self.error(epoch, start, exc, step=taken)
            start = time.monotonic()
        self.note(Dropped, epoch, start)
        errors = int(isinstance(last, Error))
        return Played(last, taken + errors + isinstance(last, Stop), taken, errors)

    # ---- one epoch's next() calls: the loop every scenario plays

    def calls(self, epoch: int) -> Played:
        """Call `next()` on `self.it` until StopIteration (and `calls_after_stop` calls more),
        an error past the driver's `max_errors`, a fatal one with `stop_at_fatal`,
        `calls_after_error` calls after the first error, `max_events` calls, or a hook
        (`before_next`, `after_batch`) ending the epoch; each call noted."""
        plan = self.plan
        errors = taken = 0
        first_error: int | None = None  # the call that raised first
        last: Call | None = None
        for calls in range(plan.max_events):  # calls: next() calls made so far
            if not self.before_next(epoch, taken, calls):
                return Played(None, calls, taken, errors)
            last = self.next(self.it, epoch, taken, self.kept)
            if type(last) is Stop:
                for _ in range(plan.calls_after_stop):
                    self.next(self.it, epoch)
                return Played(last, calls, taken, errors)
            if type(last) is Error:
                errors += 1
                first_error = calls if first_error is None else first_error
                if errors > self.max_errors or (plan.stop_at_fatal and last.fatal):
                    return Played(last, calls + 1, taken, errors)
            else:
                taken += 1
                if not self.after_batch(epoch, taken):
                    return Played(None, calls + 1, taken, errors)
            after_error = plan.calls_after_error
            if (
                first_error is not None
                and after_error is not None
                and calls - first_error >= after_error
            ):
                return Played(last, calls + 1, taken, errors)
        return Played(last, plan.max_events, taken, errors)

    @property
    def max_errors(self) -> int:
        """How many errors an epoch goes on after (the plan's `max_errors`)."""
        return self.plan.max_errors

    def before_next(self, epoch: int, taken: int, calls: int) -> bool:
        """What the user does before the epoch's next `next()`, after `taken` batches and
        `calls` calls: kill a worker (`kill_worker_after`), leave (`leave`: by `del` or by the
        loader's process being killed). False: the epoch ends here."""
        plan = self.plan
        if epoch == 0 and taken == plan.kill_worker_after and not self.worker_killed:
            self.kill_one_worker(epoch)
        leave = plan.leave.get(epoch)
        if leave is None or leave.how not in ("drop", "kill_parent"):
            return True
        if leave.after != (taken if leave.counting == "batches" else calls):
            return True
        if leave.how == "kill_parent" and calls == 0 and plan.before_leave:
            self.lazy_start(self.it)
        self.awaited(epoch, plan.before_leave)
        if leave.how == "kill_parent":
            self.note(KillParent, epoch, time.monotonic())
            sandbox.kill_self()
        return False

    def after_batch(self, epoch: int, taken: int) -> bool:
        """What the user does after the epoch's `taken`-th batch: pause (`pause_s`). False: the
        epoch ends here."""
        self.pause(epoch, taken)
        return True

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
                self.it = iter(loader)
        except Exception as exc:  # e.g. a worker_init_fn error raised while starting workers
            self.error(epoch, start, exc, at="iter")
            return
        played = self.calls(epoch)
        if played.errors and plan.hold_after_error_s:
            self.alive_after_error(epoch)
        start = time.monotonic()
        self.it = None
        self.note(Dropped, epoch, start)
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
            threads_before = _child.threads_now()
            with self.fd_limit():
                loader = self.construct()
                if loader is None:
                    return
                if plan.len_of_loader:
                    start = time.monotonic()
                    try:
                        self.note(Len, None, start, length=len(loader))
                    except TypeError as exc:
                        self.error(None, start, exc, at="len")
                for epoch in range(first, first + plan.epochs):
                    self.epoch(loader, epoch)
            # Out of the fd limit: dropping the loader and the leak count need descriptors.
            start = time.monotonic()
            del loader
            gc.collect()
            dropped = time.monotonic()
            # The count is of what the loader keeps, not of closes still on their way: torch's
            # index queues' feeder threads close their pipes after the drop (its count differed
            # between the 4 loaders in 4 of 5 runs; in none of 6 once they were joined). The
            # drop's time stops before this wait.
            _child.settle_threads(threads_before, SETTLE_S)
            fds = len(os.listdir("/proc/self/fd"))
            self.note(LoaderDropped, None, start, end=dropped, fds=fds)


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
    driver = Driver(cls, plan, record_dir, linger_by_type)
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
