"""Play a loader on several ranks at once: a `torch.distributed` process group in one sandbox.

`faultinject.driver.run(loader, plan)` plays a `RankPlan` in a `faultinject.sandbox` child (bounded
by its deadline, everything it starts reaped by pid, as any plan; `group` is its target): the child
picks a free loopback port and forks `world` rank processes; each joins a gloo group over 127.0.0.1
(`env://`), builds the loader under test on its part of the data (a map-style dataset behind a
`DistributedSampler`, or an iterable dataset that shards itself by rank and by worker) with
`faultinject._play`'s driver, and plays `epochs` epochs, calling the sampler's `set_epoch` before
each. After every batch a rank calls a real `all_reduce`, as DDP's gradient sync does: ranks with
uneven batch counts leave one rank waiting in it, and the group's collective timeout
(`step_timeout_s`) turns the hang DDP would have into an error that the rank reports. Each rank
streams its events (`faultinject.events`, its `rank` set) through a pipe to the child, which relays
them to the harness (`sandbox.note`), so a group that hangs still leaves its record.

After its last epoch a rank drops its loader, gives its workers `MUST_BOUND_S` to go (those left
are reported in its `WorkersLeft` event; they are then the sandbox child's, a subreaper, and
counted as `lingering`), leaves the group and exits. Its multiprocessing helpers (a spawning
loader's resource tracker), named in the same event, exit after it and are reaped by the group,
as init reaps them under a training script. The run's `port_listening` says whether anything
still listens on the group's port once the run is over.

The grading is not this module's job (`conformance.harness.ranks`).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gc
import os
import pickle
import select
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from loaderspec.faultinject import _fire, _wire, loaders, processes, sandbox
from loaderspec.faultinject._play import Driver
from loaderspec.faultinject.datasets import FaultyDataset
from loaderspec.faultinject.events import (
    Error,
    GroupDone,
    GroupPort,
    Raised,
    Resumed,
    StepFailed,
    Stop,
    WaitFailed,
    WorkersLeft,
)
from loaderspec.faultinject.plan import MUST_BOUND_S, RankPlan
from torch.utils.data import IterableDataset
from torch.utils.data.distributed import DistributedSampler

from loaderspec import tracewriter
from loaderspec.vocabulary import TRACE_DIR_ENV

__all__ = [
    "RankPlan",
    "RankShardedIterable",
    "expected_indices",
    "group",
    "listening",
    "refusal",
    "timed",
]

LOOPBACK = "127.0.0.1"
# How long past the step timeout a finished rank waits for the others to finish too.
_DONE_MARGIN_S = 10.0


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
        info = _fire.worker_info()  # looked up now: a thread loader may replace torch's
        yield from self.expected(*((info.id, info.num_workers) if info else (None, 1)))

    def __repr__(self) -> str:
        return f"RankShardedIterable({self.n}, rank={self.rank}, world={self.world})"


def dataset(plan: RankPlan, rank: int) -> RankShardedIterable | FaultyDataset:
    """Rank `rank`'s dataset (an `IterableDataset` when the plan says so)."""
    if plan.iterable:
        return RankShardedIterable(plan.n, rank, plan.world)
    return FaultyDataset(plan.n, plan.faults)


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


class _Rank(Driver):
    """One rank's play, in its own process: `_play`'s driver, every event down `out_fd`."""

    text_limit = 500
    plan: RankPlan

    def __init__(self, cls: type, plan: RankPlan, rank: int, out_fd: int) -> None:
        super().__init__(cls, plan, None)
        self.rank = rank
        self.send = functools.partial(_wire.send, out_fd)
        self.loader: Any = None  # the rank's current loader (a new one after a resume)
        self.order: Any = None  # and its sampler, which the user's set_epoch calls go to

    def dataset(self) -> Any:
        """The rank's dataset; its sampler, made with it, is the next loader's (`kwargs`)."""
        data = dataset(self.plan, self.rank or 0)
        self.order = sampler(self.plan, self.rank or 0, data)
        return data

    def kwargs(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        out = super().kwargs(given)
        if self.order is not None:
            out["sampler"] = self.order
        return out

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
            self.note(StepFailed, epoch, start, text=text, step=steps)
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
            self.note(WaitFailed, None, time.monotonic(), text=f"{type(exc).__name__}: {exc}"[:300])
        self.note(GroupDone, None, start)

    def epochs(self) -> None:
        plan = self.plan
        loaders.start_process_helpers(self.cls)  # as every scenario does, before the loader
        self.loader = self.construct()
        if self.loader is None:
            return
        for epoch in range(plan.epochs):
            if self.order is not None:
                self.order.set_epoch(epoch)
            if not self.rank_epoch(epoch):
                break
        start = time.monotonic()
        self.loader = None
        gc.collect()
        workers = [p.pid for p in processes.children(helpers=False)]
        left = processes.wait_gone(workers, self.plan.drop_wait_s)
        # multiprocessing's helpers of this rank (the resource tracker a spawning loader starts):
        # they exit after the rank does, and the group reaps them (`_reap_helpers`).
        helpers = [p.pid for p in processes.children() if processes.is_mp_helper(p)]
        self.note(WorkersLeft, None, start, pids=tuple(left), helpers=tuple(helpers))

    def resumed(self, epoch: int) -> Any:
        """A new loader of this rank that loaded the state of the one before (None: failed)."""
        start = time.monotonic()
        try:
            state = pickle.dumps(self.loader.state_dict())
            self.loader = None
            gc.collect()
            data = self.dataset()
            if self.order is not None:
                self.order.set_epoch(epoch)
            loader = self.cls(data, **self.kwargs())
            loader.load_state_dict(pickle.loads(state))
        except Exception as exc:
            text = f"resume: {type(exc).__name__}: {exc}"[:500]
            self.note(Error, epoch, start, text=text, type=type(exc).__name__, at="resume")
            return None
        self.note(Resumed, epoch, start, bytes=len(state))
        return loader

    def before_next(self, epoch: int, taken: int, calls: int) -> bool:
        """The plan's moves (`Driver.before_next`), then, at `resume_at`, the resume: the
        epoch goes on with a new loader's iterator (it ends if the resume failed)."""
        if not super().before_next(epoch, taken, calls):
            return False
        if self.plan.resume_at != (epoch, taken):
            return True
        self.it = None
        self.loader = self.resumed(epoch)
        if self.loader is None:
            return False
        self.it = iter(self.loader)
        return True

    def after_batch(self, epoch: int, taken: int) -> bool:
        """The plan's moves (`Driver.after_batch`), then the gradient sync (`step`)."""
        return super().after_batch(epoch, taken) and self.step(epoch, taken)

    def rank_epoch(self, epoch: int) -> bool:
        """One epoch (`Driver.calls`); False when the group cannot go on (a failed step or
        resume, a loader error)."""
        self.it = iter(self.loader)
        played = self.calls(epoch)
        self.it = None
        return isinstance(played.last, Stop)


def _rank_main(cls: type, plan: RankPlan, rank: int, out_fd: int) -> None:
    code = 0
    try:
        _Rank(cls, plan, rank, out_fd).play()
    except BaseException as exc:  # reported, then the rank exits: the group sees it gone
        code = 1
        with contextlib.suppress(Exception):
            text = f"{type(exc).__name__}: {exc}"[:500]
            ev = Raised(epoch=None, t=time.monotonic(), dt=0.0, rank=rank, text=text)
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


def listening(port: int) -> bool:
    """Whether a TCP socket on this machine listens on `port` (read off /proc/net/tcp*)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def refusal(loader: type, plan: RankPlan) -> str | None:
    """Why the loader cannot play `plan` (None: it can): a configuration it declares it cannot
    express (`faultinject.loaders.unsupported`), or a resume without `state_dict()`."""
    kwargs = {**plan.kwargs, **({} if plan.iterable else {"sampler": None})}
    why = loaders.unsupported(loader, kwargs, dataset=dataset(plan, 0))
    if plan.resume_at is not None and not loaders.stateful(loader):
        why = why or "the loader has no state_dict()/load_state_dict(): it cannot be checkpointed"
    return why


def timed(loader: type, plan: RankPlan) -> RankPlan:
    """`plan` with the step timeout a loader that declares the seconds its `iter()` takes to
    start workers (`loaders.iterator_start_s`) needs: that much more per rank (the ranks start
    their iterators at once, on cores they share, and a step waits for the slowest one)."""
    start_s = loaders.iterator_start_s(loader)
    if not start_s:
        return plan
    return replace(plan, step_timeout_s=plan.step_timeout_s + plan.world * start_s)
