"""Play a loader on several ranks at once: a `torch.distributed` process group in one sandbox.

`run(loader, plan)` plays a `RankPlan` in a `faultinject.sandbox` child (bounded by its deadline,
everything it starts reaped by pid, as any scenario): the child picks a free loopback port and
forks `world` rank processes; each joins a gloo group over 127.0.0.1 (`env://`), builds the loader
under test on its part of the data (a map-style dataset behind a `DistributedSampler`, or an
iterable dataset that shards itself by rank and by worker), and plays `epochs` epochs, calling
the sampler's `set_epoch` before each. After every batch a rank calls a real `all_reduce`, as
DDP's gradient sync does: ranks with uneven batch counts leave one rank waiting in it, and the
group's collective timeout (`step_timeout_s`) turns the hang DDP would have into an error that
the rank reports. Each rank streams its events (`faultinject.rank_events`) through a pipe to the
child, which relays them to the harness (`sandbox.note`), so a group that hangs still leaves its
record.

After its last epoch a rank drops its loader, gives its workers `MUST_BOUND_S` to go (those left
are reported in its `WorkersLeft` event; they are then the sandbox child's, a subreaper, and
counted as `lingering`), leaves the group and exits. Its multiprocessing helpers (a spawning
loader's resource tracker), named in the same event, exit after it and are reaped by the group,
as init reaps them under a training script. `RankRun.port_listening` says whether anything
still listens on the group's port once the run is over.

The grading is not this module's job (`conformance.harness.ranks`).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import pickle
import select
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from loaderspec.faultinject import _wire, loaders, processes, sandbox
from loaderspec.faultinject.datasets import FaultyDataset
from loaderspec.faultinject.driver import MUST_BOUND_S, flat
from loaderspec.faultinject.rank_events import (
    GroupDone,
    GroupPort,
    RankBatch,
    RankBuilt,
    RankError,
    RankEvent,
    RankRaised,
    RankRefused,
    RankResumed,
    RankStop,
    StepFailed,
    WaitFailed,
    WorkersLeft,
)
from loaderspec.faultinject.sandbox import SandboxReport
from torch.utils.data import IterableDataset, get_worker_info
from torch.utils.data.distributed import DistributedSampler

from loaderspec import tracewriter
from loaderspec.vocabulary import TRACE_DIR_ENV

__all__ = ["RankPlan", "RankRun", "RankShardedIterable", "expected_indices", "run"]

LOOPBACK = "127.0.0.1"
# How long past the step timeout a finished rank waits for the others to finish too.
_DONE_MARGIN_S = 10.0


@dataclass(frozen=True)
class RankPlan:
    """What every rank does. Picklable (it travels to the sandbox child).

    `iterable`: each rank reads a `RankShardedIterable(n, rank, world)`; else a map-style
    dataset of `n` items (the index each) behind `DistributedSampler(dataset, world, rank,
    shuffle=shuffle, seed=seed, drop_last=sampler_drop_last)`, passed as the loader's `sampler`.
    `kwargs`: the loader's other arguments. `step_timeout_s`: the group's collective timeout.
    `resume_at=(epoch, k)`: after k batches of that epoch every rank takes its loader's
    `state_dict()`, drops the loader and goes on with a new one (a new sampler of the same rank,
    `set_epoch(epoch)`) that loads the state, pickled as a checkpoint on disk would be.
    """

    world: int = 2
    n: int = 12
    iterable: bool = False
    shuffle: bool = True
    seed: int = 0
    sampler_drop_last: bool = False
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    epochs: int = 3
    step_timeout_s: float = 3.0
    resume_at: tuple[int, int] | None = None
    drop_wait_s: float = MUST_BOUND_S  # how long a rank's workers may take to go after its drop

    @property
    def iterators(self) -> int:
        """How many `iter()` calls each rank makes: one per epoch, one more after a resume."""
        return self.epochs + (self.resume_at is not None)


class RankShardedIterable(IterableDataset[int]):
    """An IterableDataset of the items 0..n-1 that shards itself as a user's does: rank `rank`
    of `world` takes items `rank, rank + world, ...`, and worker w of W (torch's
    `get_worker_info()`) every W-th of those from its w-th. A loader whose workers do not say who
    they are hands each item out once per worker."""

    def __init__(self, n: int, rank: int, world: int) -> None:
        self.n, self.rank, self.world = n, rank, world

    def expected(self, worker: int | None = None, num_workers: int = 1) -> list[int]:
        """The items worker `worker` of `num_workers` yields (the rank's whole shard for None)."""
        mine = list(range(self.rank, self.n, self.world))
        return mine if worker is None else mine[worker::num_workers]

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        yield from self.expected(*((info.id, info.num_workers) if info else (None, 1)))

    def __repr__(self) -> str:
        return f"RankShardedIterable({self.n}, rank={self.rank}, world={self.world})"


def dataset(plan: RankPlan, rank: int) -> RankShardedIterable | FaultyDataset:
    """Rank `rank`'s dataset (an `IterableDataset` when the plan says so)."""
    if plan.iterable:
        return RankShardedIterable(plan.n, rank, plan.world)
    return FaultyDataset(plan.n)


def sampler(
    plan: RankPlan, rank: int, data: RankShardedIterable | FaultyDataset
) -> DistributedSampler[int] | None:
    """Rank `rank`'s `DistributedSampler` (None for an iterable plan)."""
    if plan.iterable:
        return None
    return DistributedSampler(
        data,
        num_replicas=plan.world,
        rank=rank,
        shuffle=plan.shuffle,
        seed=plan.seed,
        drop_last=plan.sampler_drop_last,
    )


def expected_indices(plan: RankPlan, rank: int, epoch: int) -> list[int]:
    """The indices rank `rank` reads in `epoch`: its sampler's, after `set_epoch(epoch)` (the
    padding included), or its iterable shard's."""
    data = dataset(plan, rank)
    if isinstance(data, RankShardedIterable):
        return data.expected()
    s = sampler(plan, rank, data)
    assert s is not None, "a map-style plan has a sampler"
    s.set_epoch(epoch)
    return list(s)


# --------------------------------------------------------------------------- one rank


class _Rank:
    """One rank's play, in its own process; every event goes down `out_fd`."""

    def __init__(self, cls: type, plan: RankPlan, rank: int, out_fd: int) -> None:
        self.cls, self.plan, self.rank, self.out_fd = cls, plan, rank, out_fd
        self.loader: Any = None  # the rank's current loader (a new one after a resume)
        self.order: Any = None  # and its sampler, which the user's set_epoch calls go to

    def event(self, cls: type[RankEvent], epoch: int | None = None, **fields: Any) -> None:
        """Send one `cls` event of this rank (`dt` 0 unless given)."""
        fields.setdefault("dt", 0.0)
        ev = cls(epoch=epoch, t=time.monotonic(), rank=self.rank, **fields)
        _wire.send(self.out_fd, ev)

    def construct(self, data: Any, kwargs: dict[str, Any]) -> Any:
        try:
            return self.cls(data, **kwargs)
        except NotImplementedError as exc:
            self.event(RankRefused, reason=str(exc) or "NotImplementedError from the constructor")
        return None

    def step(self, epoch: int, steps: int) -> bool:
        """The gradient sync after a batch: a SUM all_reduce over the group; False when it failed
        (the group's timeout: another rank never joined this step)."""
        import torch
        import torch.distributed as dist

        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
        except Exception as exc:
            # gloo's text starts with its source position: "[.../unbound_buffer.cc:78] Timed out"
            text = f"{type(exc).__name__}: {str(exc).splitlines()[0].split('] ', 1)[-1][:300]}"
            self.event(StepFailed, epoch, text=text, step=steps, dt=time.monotonic() - start)
            return False
        return True

    def play(self) -> None:
        import torch.distributed as dist

        plan = self.plan
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(plan.world))
        traced = os.environ.get(TRACE_DIR_ENV)
        if traced:
            # Each rank's iterators are runs of their own: a folder beside the case's, so that
            # trace-check never merges the records of concurrent loader processes into one run.
            os.environ[TRACE_DIR_ENV] = f"{traced.rstrip(os.sep)}-rank{self.rank}"
            tracewriter.configure(os.environ[TRACE_DIR_ENV])
        timeout = datetime.timedelta(seconds=plan.step_timeout_s)
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
        try:
            self.epochs()
            self.wait_for_the_others()
        finally:
            dist.destroy_process_group()

    def wait_for_the_others(self) -> None:
        """Stay in the group until every rank is done, as a training script's ranks do (a rank
        that left would turn another's wait in an all_reduce into an error at once, hiding the
        hang DDP would have): each rank marks itself done in the group's store and waits, for
        the step timeout and a margin, for the others' marks."""
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()
        store.set(f"loaderspec/done/{self.rank}", "1")
        keys = [f"loaderspec/done/{rank}" for rank in range(self.plan.world)]
        start = time.monotonic()
        try:
            store.wait(keys, datetime.timedelta(seconds=self.plan.step_timeout_s + _DONE_MARGIN_S))
        except Exception as exc:
            self.event(WaitFailed, text=f"{type(exc).__name__}: {exc}"[:300])
        self.event(GroupDone, dt=time.monotonic() - start)

    def epochs(self) -> None:
        plan = self.plan
        loaders.start_process_helpers(self.cls)  # as every scenario does, before the loader
        data = dataset(plan, self.rank)
        self.order = sampler(plan, self.rank, data)
        kwargs = dict(plan.kwargs)
        if self.order is not None:
            kwargs["sampler"] = self.order
        self.loader = self.construct(data, kwargs)
        if self.loader is None:
            return
        built = type(self.loader)
        self.event(RankBuilt, ref=f"{built.__module__}:{built.__qualname__}")
        for epoch in range(plan.epochs):
            if self.order is not None:
                self.order.set_epoch(epoch)
            if not self.epoch(epoch):
                break
        start = time.monotonic()
        self.loader = None
        gc.collect()
        workers = [p.pid for p in processes.children(helpers=False)]
        left = processes.wait_gone(workers, self.plan.drop_wait_s)
        # multiprocessing's helpers of this rank (the resource tracker a spawning loader starts):
        # they exit after the rank does, and the group reaps them (`_reap_helpers`).
        helpers = [p.pid for p in processes.children() if processes.is_mp_helper(p)]
        self.event(
            WorkersLeft, pids=tuple(left), dt=time.monotonic() - start, helpers=tuple(helpers)
        )

    def resumed(self, epoch: int) -> Any:
        """A new loader of this rank that loaded the state of the one before (None: failed)."""
        plan = self.plan
        try:
            state = pickle.dumps(self.loader.state_dict())
            self.loader = None
            gc.collect()
            data = dataset(plan, self.rank)
            order = sampler(plan, self.rank, data)
            kwargs = dict(plan.kwargs)
            if order is not None:
                order.set_epoch(epoch)
                kwargs["sampler"] = order
            loader = self.cls(data, **kwargs)
            loader.load_state_dict(pickle.loads(state))
            self.order = order
        except Exception as exc:
            self.event(RankError, epoch, text=f"resume: {type(exc).__name__}: {exc}"[:500])
            return None
        self.event(RankResumed, epoch, bytes=len(state))
        return loader

    def epoch(self, epoch: int) -> bool:
        """One epoch; False when the group cannot go on (a failed step or a loader error)."""
        it = iter(self.loader)
        steps = 0
        while True:
            if self.plan.resume_at == (epoch, steps):
                del it
                self.loader = self.resumed(epoch)
                if self.loader is None:
                    return False
                it = iter(self.loader)
            start = time.monotonic()
            try:
                batch = next(it)
            except StopIteration:
                self.event(RankStop, epoch, after=steps)
                return True
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"[:500]
                self.event(RankError, epoch, text=text, step=steps)
                return False
            steps += 1
            self.event(RankBatch, epoch, value=flat(batch), dt=time.monotonic() - start)
            if not self.step(epoch, steps):
                return False


def _rank_main(cls: type, plan: RankPlan, rank: int, out_fd: int) -> None:
    code = 0
    try:
        _Rank(cls, plan, rank, out_fd).play()
    except BaseException as exc:  # reported, then the rank exits: the group sees it gone
        code = 1
        with contextlib.suppress(Exception):
            text = f"{type(exc).__name__}: {exc}"[:500]
            ev = RankRaised(epoch=None, t=time.monotonic(), dt=0.0, rank=rank, text=text)
            _wire.send(out_fd, ev)
    finally:
        os._exit(code)


# --------------------------------------------------------------------------- the group


def free_port() -> int:
    """A loopback TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def group(cls: type, plan: RankPlan) -> int:
    """The sandbox target: fork the ranks, relay their events, reap them; the group's port."""
    port = free_port()
    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port))
    sandbox.note(GroupPort(epoch=None, t=time.monotonic(), dt=0.0, port=port))
    readers: dict[int, int] = {}  # read fd -> rank
    pidfds: dict[int, int] = {}  # pidfd -> rank pid
    for rank in range(plan.world):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the rank; it never returns
            os.close(r)
            for fd in (*readers, *pidfds):
                os.close(fd)
            _rank_main(cls, plan, rank, w)
        os.close(w)
        os.set_blocking(r, False)
        readers[r] = rank
        pidfds[os.pidfd_open(pid)] = pid
    decoders = {fd: _wire.ReceiveBuffer() for fd in readers}
    running = dict(pidfds)
    helpers: list[int] = []
    while running:  # bounded by the sandbox's deadline, which kills the whole session
        ready, _, _ = select.select([*readers, *running], [], [])
        for fd in ready:
            if fd in running:
                processes.reap(running.pop(fd))
                os.close(fd)
        helpers += _relay(readers, decoders)
    helpers += _relay(readers, decoders)  # what the last ranks wrote before they exited
    for fd in readers:
        os.close(fd)
    _reap_helpers(helpers)
    return port


def _reap_helpers(pids: list[int]) -> None:
    """Reap the ranks' multiprocessing helpers once they exit (bounded by `MUST_BOUND_S`). A
    rank's resource tracker exits when its rank has, and is then re-parented to this process
    (a subreaper), as it would be to init under a training script, which reaps it: not reaped
    here, it would be counted as the loader's zombie. A helper still running past the bound is
    left to be counted; no worker is ever reaped here."""
    processes.wait_gone(pids, MUST_BOUND_S)
    for pid in pids:
        processes.reap(pid)


def _relay(readers: dict[int, int], decoders: dict[int, _wire.ReceiveBuffer]) -> list[int]:
    """Pass the ranks' events on to the harness; the helper pids their `left` events name."""
    helpers: list[int] = []
    for fd in readers:
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not data:
                break
            for ev in decoders[fd].feed(data):
                helpers += ev.helpers if isinstance(ev, WorkersLeft) else []
                sandbox.note(ev)
    return helpers


# --------------------------------------------------------------------------- the harness side


E = TypeVar("E", bound=RankEvent)


@dataclass
class RankRun:
    """A played rank plan: the sandbox's report and every rank's events, in arrival order."""

    plan: RankPlan
    report: SandboxReport | None  # None: refused before anything started
    events: list[RankEvent] = field(default_factory=list)
    refused: str | None = None
    port: int | None = None
    port_listening: bool = False
    leak_note: str = ""  # why the wait after a drop was not the usual one (set by the harness)

    def of(self, rank: int | None, epoch: int | None, kind: type[E]) -> list[E]:
        """Events of `rank` (None: any), `epoch` (None: any) and class `kind`, in order."""
        return [
            e
            for e in self.events
            if isinstance(e, kind) and rank in (None, e.rank) and epoch in (None, e.epoch)
        ]

    def batches(self, rank: int, epoch: int) -> list[list[Any]]:
        return [e.value for e in self.of(rank, epoch, RankBatch)]

    def items(self, rank: int, epoch: int) -> list[Any]:
        return [x for b in self.batches(rank, epoch) for x in b]

    def ended(self, rank: int, epoch: int) -> bool:
        """Whether the rank's epoch ended in StopIteration."""
        return bool(self.of(rank, epoch, RankStop))


def _listening(port: int) -> bool:
    """Whether a TCP socket on this machine listens on `port` (read off /proc/net/tcp*)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def run(
    loader: type, plan: RankPlan, *, deadline_s: float, linger_s: float = MUST_BOUND_S
) -> RankRun:
    """Play `plan` on `plan.world` ranks of the loader; never raises for what the loader does.

    A configuration the loader declares it cannot express (`faultinject.loaders.unsupported`)
    is not run (`refused`); so is one its constructor refuses with `NotImplementedError`. A
    loader that declares the seconds its `iter()` takes to start workers
    (`loaders.iterator_start_s`) gets that much more step timeout per rank: the ranks start
    their iterators at once, on cores they share, and a step waits for the slowest one.
    """
    kwargs = {**plan.kwargs, **({} if plan.iterable else {"sampler": None})}
    why = loaders.unsupported(loader, kwargs, dataset=dataset(plan, 0))
    if plan.resume_at is not None and not loaders.stateful(loader):
        why = why or "the loader has no state_dict()/load_state_dict(): it cannot be checkpointed"
    if why:
        return RankRun(plan, None, refused=why)
    start_s = loaders.iterator_start_s(loader)
    if start_s:
        plan = replace(plan, step_timeout_s=plan.step_timeout_s + plan.world * start_s)
    report = sandbox.run(
        group, loader, plan, deadline_s=deadline_s, linger_s=linger_s, subreaper=True
    )
    events = [n for n in report.notes if isinstance(n, RankEvent)]
    out = RankRun(plan, report, [e for e in events if not isinstance(e, GroupPort)])
    out.refused = next((e.reason for e in events if isinstance(e, RankRefused)), None)
    out.port = next((e.port for e in events if isinstance(e, GroupPort)), None)
    out.port_listening = out.port is not None and _listening(out.port)
    return out
