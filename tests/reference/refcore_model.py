"""A simulated world for driving ``ProtocolCore``: workers, FIFOs, faults, no processes.

``World`` is a ``reference.loop.Port``: the loop the shell runs (``loop.start_epoch``,
``loop.next_batch``, ``loop.shut_down``) runs here on a simulated world, where every IO step is a
choice drawn by the caller (Hypothesis). So interleavings of worker steps and main steps, and
faults (a worker killed or hung at any point, the timeout expiring during any wait, with the
deaths seen by then; a result that cannot be read, FaultRecvError; the pin thread dying on one,
FaultPinDeath), are explored with the shell's own loop, not a copy. The history the properties
need (what was handed out, which tasks a worker's exhaustion retired) is kept here, from the
world's side; after every step the spec's invariants are checked in Python, and a violation
raises ``AssertionError`` naming the property.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loaderspec.reference import loop
from loaderspec.reference.core import Delivery, ProtocolConfig, ProtocolCore
from loaderspec.reference.messages import (
    Arrived,
    Exited,
    IndexMessage,
    PinDied,
    RecvFailed,
    Result,
    Task,
    TimedOut,
    WaitEvent,
)
from loaderspec.reference.proposals import ALARM_ACTIONS, try_of
from loaderspec.reference.steps import Kind, ProtocolViolation
from loaderspec.reference.transitions import Stage
from loaderspec.reference.worker_core import WorkerCore

from loaderspec.vocabulary import Action


@dataclass
class Config:
    num_workers: int
    prefetch_factor: int
    in_order: bool
    persistent: bool
    iterable: bool
    num_tasks: int  # map-style: the sampler's length
    shards: tuple[int, ...] = ()  # iterable: items per worker
    errors: frozenset[int] = frozenset()  # map-style indices whose fetch raises
    pin_memory: bool = False
    timeout: bool = False  # timeout > 0: any wait of the main process may expire

    def protocol(self) -> ProtocolConfig:
        return ProtocolConfig(
            self.num_workers,
            self.prefetch_factor,
            in_order=self.in_order,
            persistent_workers=self.persistent,
            iterable=self.iterable,
            pin_memory=self.pin_memory,
        )


@dataclass
class SimWorker:
    """A worker's world: its queues, its dataset shard and its faults. What it does with a
    message is its pure core's (``reference/worker_core.py``), as in ``reference/worker.py``."""

    core: WorkerCore
    index_queue: deque[IndexMessage] = field(default_factory=deque)
    result_queue: deque[Result] = field(default_factory=deque)
    alive: bool = True
    yielded: int = 0  # items of its shard fetched this epoch (iterable)
    death_seen: bool = False
    hung: bool = False  # stuck inside a fetch: takes no more steps (FaultHangWorker)

    @property
    def exited(self) -> bool:  # exited cleanly on its sentinel
        return self.core.exited


class World:
    """Workers and queues around one core; ``choose(n)`` picks among n enabled steps."""

    def __init__(self, cfg: Config, choose: Callable[[int], int]) -> None:
        self.cfg = cfg
        self.choose = choose
        self.core = ProtocolCore(cfg.protocol())
        self.workers = [
            SimWorker(WorkerCore(w, iterable=cfg.iterable)) for w in range(cfg.num_workers)
        ]
        self.sampler: Iterator[Any] = iter(())
        self.kill_budget = 0
        self.hang_budget = 0
        self.recv_error_budget = 0  # reads that fail (no pin thread: the main process reads)
        self.pin_death_budget = 0  # the pin thread dies on a result it cannot read
        self.pin_dead = False
        self.killed_any = False
        self.shut = False
        self.handed_out: list[tuple[int, int]] = []  # (epoch, idx) this epoch
        self.assigned: dict[int, int] = {}  # task idx -> worker, this epoch
        # (epoch, worker) -> the task a worker's shard ran dry at (a worker may still run dry in
        # a broken-off epoch while the next one starts).
        self.exhausted_at: dict[tuple[int, int], int] = {}
        self.in_flight: set[int] = set()  # task idxs sent and not yet answered or skipped
        self.new_sampler()

    # ------------------------------------------------------------------ the world ---------
    def new_sampler(self) -> None:
        if self.cfg.iterable:
            self.sampler = iter(lambda: None, object())  # _InfiniteConstantSampler
        else:
            self.sampler = iter(range(self.cfg.num_tasks))

    def worker_steps(self) -> list[Callable[[], None]]:
        steps: list[Callable[[], None]] = []
        for w, sw in enumerate(self.workers):
            if sw.alive and not sw.exited and not sw.hung and sw.index_queue:
                steps.append(lambda w=w: self.worker_step(w))
            if sw.alive and not sw.exited and self.kill_budget > 0:
                steps.append(lambda w=w: self.kill(w))
            if sw.alive and not sw.exited and not sw.hung and self.hang_budget > 0:
                steps.append(lambda w=w: self.hang(w))
            if self.cfg.pin_memory and sw.result_queue and self.pin_death_budget > 0:
                steps.append(lambda w=w: self.pin_dies(w))
        return steps

    def pin_dies(self, w: int) -> None:
        """FaultPinDeath: the pin thread reads ``w``'s next result, cannot rebuild it, dies."""
        self.in_flight.discard(self.workers[w].result_queue.popleft().idx)  # lost
        self.pin_death_budget -= 1
        self.pin_dead = True

    def hang(self, w: int) -> None:
        self.workers[w].hung = True
        self.hang_budget -= 1
        self.killed_any = True  # its tasks will not all be handed out

    def kill(self, w: int) -> None:
        self.workers[w].alive = False
        self.kill_budget -= 1
        self.killed_any = True

    def worker_step(self, w: int) -> None:
        """One message off the worker's index queue, stepped by the worker's own core (as
        ``reference/worker.py`` steps it; called directly, not through ``loop.take``: a worker's
        records belong in its own process's file, not among the main process's); the world only
        plays the fetcher."""
        sw = self.workers[w]
        msg = sw.index_queue.popleft()
        core = sw.core
        step = core.next_action(msg, self.core.stage is Stage.WORKERS_TOLD)
        action = step.action
        if action is Action.WORKER_FETCH:
            assert isinstance(msg, Task)
            result = core.fetch(msg.idx, *self.fetched(sw, w, msg))
            if result.kind is Kind.EXHAUSTED:
                self.exhausted_at[core.epoch, w] = msg.idx
            core.put(result)
            sw.result_queue.append(result)
        elif action is Action.WORKER_SKIP_INDEX:
            assert step.task is not None
            self.in_flight.discard(step.task)
            core.skip_index(step.task)
        elif action is Action.WORKER_ACK_RESUME:
            sw.yielded = 0
            sw.result_queue.append(core.ack_resume())
        else:
            core.exit()  # WorkerExit

    def fetched(self, sw: SimWorker, w: int, task: Task) -> tuple[Kind, Any]:
        """What the fetcher gives for ``task``: the next item of the worker's shard (or its
        end), a raise for an index in ``errors``, or the item (epoch, idx)."""
        item = (sw.core.epoch, task.idx)
        if self.cfg.iterable:
            if sw.yielded >= self.cfg.shards[w]:
                return Kind.EXHAUSTED, None
            sw.yielded += 1
            return Kind.DATA, item
        return (Kind.ERROR if task.index in self.cfg.errors else Kind.DATA), item

    def visible_deaths(self) -> list[int]:
        """Dead workers the main process can see: their results are all read (the shell's
        Receiver reads what a worker sent before it reports its exit)."""
        return [
            w
            for w, sw in enumerate(self.workers)
            if not sw.alive and not sw.result_queue and not sw.death_seen
        ]

    def events(self) -> list[tuple[str, int]]:
        """What the main process could read now: a result of some worker (or a failed read of
        one), a death, the pin thread's death, or (nothing to read) the timeout."""
        if self.pin_dead:
            return [("pin_died", -1)]  # nothing comes through a dead pin thread
        out = [("msg", w) for w, sw in enumerate(self.workers) if sw.result_queue]
        if self.recv_error_budget > 0 and not self.cfg.pin_memory:
            out += [("recv_error", w) for w, sw in enumerate(self.workers) if sw.result_queue]
        out += [("death", w) for w in self.visible_deaths()]
        if self.cfg.timeout and not any(sw.result_queue for sw in self.workers):
            out.append(("timeout", -1))  # the spec's InputEmpty: nothing left to read
        return out

    # ------------------------------------------------------------------ invariants --------
    def check(self) -> None:
        core = self.core
        assert core.tasks_outstanding <= core.max_tasks, "PrefetchBound"
        assert len(self.in_flight) <= core.max_tasks, "PrefetchBound (in flight)"
        idxs = [i for _, i in self.handed_out]
        assert len(idxs) == len(set(idxs)), "NoDuplicateDelivery"
        if self.cfg.in_order:
            assert idxs == sorted(idxs), "InOrderDelivery"
        assert all(e == core.epoch for e, _ in self.handed_out), "NoStaleEpochDelivery"
        # The core walks its rows without the ALARM_ACTIONS while no event is reported:
        # the cached flag must be the state's, and each of those actions refused there.
        assert core.alarm == core._alarmed(), "alarm is stale"
        if not core.alarm:
            for action in ALARM_ACTIONS:
                ask, step, pick = try_of(action)
                proposed = ask(core)
                refused = proposed is not None if step or pick else proposed is None
                assert refused, f"{action.value} is enabled while no event is reported"

    def check_end_of_epoch(self) -> None:
        """After StopIteration: NoSilentLoss and, without faults, ExactlyOnce."""
        handed = {i for _, i in self.handed_out}
        epoch = self.core.epoch
        # Retired by IterableDataset exhaustion: the task its worker ran dry at, and every later
        # task sent to that worker (the spec's assigned / exhausted_at).
        retired = {
            i
            for i, w in self.assigned.items()
            if (epoch, w) in self.exhausted_at and i >= self.exhausted_at[epoch, w]
        }
        sent = set(range(self.core.send_idx))
        assert sent == handed | retired, "NoSilentLoss"
        if not self.killed_any:
            want = sum(self.cfg.shards) if self.cfg.iterable else self.cfg.num_tasks
            assert len(handed) == want, "ExactlyOnce"

    # ------------------------------------------------------------------ the port ----------
    def next_index(self) -> Any:
        return next(self.sampler)

    def send(self, worker: int, message: IndexMessage) -> None:
        loop.log_write(self.core)  # as the shell does
        if isinstance(message, Task):
            self.in_flight.add(message.idx)
            self.assigned[message.idx] = worker
        self.workers[worker].index_queue.append(message)
        self.check()

    def wait(self) -> WaitEvent:
        """Run world steps until the main process has something to read."""
        while True:
            self.check()
            evs = self.events()
            steps = self.worker_steps()
            n = len(evs) + len(steps)
            real = n - (1 if ("timeout", -1) in evs else 0)
            hung = any(sw.hung for sw in self.workers)
            assert real > 0 or hung, "NoDeadlock: main waits and nothing can happen"
            assert n > 0, "IterationTerminates: a worker hangs and no timeout is set"
            pick = self.choose(n)
            if pick < len(steps):
                steps[pick]()
                continue
            kind, w = evs[pick - len(steps)]
            if kind == "timeout":  # with the deaths the port sees at the deadline
                ended = self.visible_deaths()
                for dead in ended:
                    self.workers[dead].death_seen = True
                return TimedOut(1.0, tuple(ended))
            if kind == "death":
                self.workers[w].death_seen = True
                return Exited((w,))
            if kind == "pin_died":
                return PinDied(None, "simulated")
            result = self.workers[w].result_queue.popleft()
            self.in_flight.discard(result.idx)
            if kind == "recv_error":
                self.recv_error_budget -= 1
                return RecvFailed(w, "simulated")
            return Arrived(w, result)

    def set_pin_done(self, take_step: Callable[[], None]) -> None:
        take_step()

    def join_pin_thread(self) -> None:
        pass

    def set_workers_done(self, take_step: Callable[[], None]) -> None:
        take_step()

    def reap(self, workers: list[int], *, grace: bool, block: bool) -> Iterator[tuple[int, bool]]:
        # Workers that are alive drain their queues (skipping tasks: done event) and exit; a hung
        # one does not: the bounded join runs out and it is killed, then reaped.
        for w in workers:
            sw = self.workers[w]
            yield w, sw.alive and sw.hung

    def shut_down(self) -> None:
        if self.shut:
            return
        self.shut = True
        loop.shut_down(self.core, self)

    # ------------------------------------------------------------------ the user ----------
    def start_epoch(self, first: bool) -> None:
        self.handed_out = []
        self.in_flight = set()
        self.assigned = {}
        self.new_sampler()
        loop.start_epoch(self.core, self, resume=not first)
        self.check()

    def next(self) -> Delivery:
        """One next(), by the shell's loop: a hand-out, or StopIteration (checked), or Failed."""
        try:
            delivery = loop.next_batch(self.core, self)
        except StopIteration:
            self.check_end_of_epoch()
            raise
        epoch, idx = delivery.payload
        assert idx == delivery.idx
        self.handed_out.append((epoch, delivery.idx))
        self.check()
        return delivery

    def let_go(self) -> None:
        """The user drops the iterator: shutdown, then nothing can be handed out any more."""
        self.shut_down()
        core = self.core
        assert all(core.joined), "ShutdownCompletes"
        try:
            core.process_data()
        except ProtocolViolation:
            pass
        else:
            raise AssertionError("NoDeliveryAfterShutdown")
