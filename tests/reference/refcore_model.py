"""A simulated world for driving ``ProtocolCore`` with events: workers, FIFOs, faults, no processes.

The driver below mirrors ``reference/shell.py``'s loop (``_next_data``, ``_reset``, shutdown) but
every IO step is a choice drawn by the caller (Hypothesis), so interleavings of worker steps and
main steps, and faults (a worker killed or hung at any point, the timeout expiring during any
wait), are explored. After every step the spec's
invariants are checked in Python; a violation raises ``AssertionError`` naming the property.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loaderspec.vocabulary import Action
from reference.core import Kind, Phase, ProtocolCore, ProtocolViolation

RESUME = "resume"


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


@dataclass
class SimWorker:
    index_queue: deque[Any] = field(default_factory=deque)
    result_queue: deque[tuple[int, Kind, Any]] = field(default_factory=deque)
    alive: bool = True
    exited: bool = False  # exited cleanly on its sentinel
    iteration_end: bool = False
    yielded: int = 0
    epoch: int = 0
    death_seen: bool = False
    hung: bool = False  # stuck inside a fetch: takes no more steps (FaultHangWorker)


class Failed(Exception):
    """The simulated next() raised RuntimeError (worker death or timeout)."""


class World:
    """Workers and queues around one core; ``choose(n)`` picks among n enabled steps."""

    def __init__(self, cfg: Config, choose: Callable[[int], int]) -> None:
        self.cfg = cfg
        self.choose = choose
        self.core = ProtocolCore(
            cfg.num_workers,
            cfg.prefetch_factor,
            in_order=cfg.in_order,
            persistent_workers=cfg.persistent,
            iterable=cfg.iterable,
            pin_memory=cfg.pin_memory,
        )
        self.workers = [SimWorker() for _ in range(cfg.num_workers)]
        self.sampler = iter(())
        self.kill_budget = 0
        self.hang_budget = 0
        self.killed_any = False
        self.handed_out: list[tuple[int, int]] = []  # (epoch, idx) this epoch
        self.in_flight: set[int] = set()  # task idxs sent and not yet answered or skipped
        self.fetched: dict[int, int] = {}  # task idx -> times a worker fetched it this epoch
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
        return steps

    def hang(self, w: int) -> None:
        self.workers[w].hung = True
        self.hang_budget -= 1
        self.killed_any = True  # its tasks will not all be handed out

    def kill(self, w: int) -> None:
        self.workers[w].alive = False
        self.kill_budget -= 1
        self.killed_any = True

    def worker_step(self, w: int) -> None:
        """One message off the worker's index queue (torch's _worker_loop body)."""
        sw = self.workers[w]
        msg = sw.index_queue.popleft()
        if msg == RESUME:
            sw.epoch += 1
            sw.iteration_end = False
            sw.yielded = 0
            sw.result_queue.append((-1, Kind.RESUME, None))
            return
        if msg is None:
            sw.exited = True
            return
        idx, index = msg
        if sw.iteration_end:
            self.in_flight.discard(idx)  # WorkerSkipIndex
            return
        self.fetched[idx] = self.fetched.get(idx, 0) + 1
        if self.cfg.iterable:
            if sw.yielded < self.cfg.shards[w]:
                sw.yielded += 1
                sw.result_queue.append((idx, Kind.DATA, (sw.epoch, idx)))
            else:
                sw.iteration_end = True
                sw.result_queue.append((idx, Kind.EXHAUSTED, None))
        elif index in self.cfg.errors:
            sw.result_queue.append((idx, Kind.ERROR, (sw.epoch, idx)))
        else:
            sw.result_queue.append((idx, Kind.DATA, (sw.epoch, idx)))

    def events(self) -> list[tuple[str, int]]:
        """What the main process could read now: a result of some worker, or a death."""
        out = [("msg", w) for w, sw in enumerate(self.workers) if sw.result_queue]
        out += [
            ("death", w)
            for w, sw in enumerate(self.workers)
            if not sw.alive and not sw.result_queue and not sw.death_seen
        ]
        if self.cfg.timeout:
            out.append(("timeout", -1))
        return out

    # ------------------------------------------------------------------ invariants --------
    def check(self) -> None:
        core, cfg = self.core, self.cfg
        assert core.tasks_outstanding <= core.max_tasks, "PrefetchBound"
        assert len(self.in_flight) <= core.max_tasks, "PrefetchBound (in flight)"
        idxs = [i for _, i in self.handed_out]
        assert len(idxs) == len(set(idxs)), "NoDuplicateDelivery"
        if cfg.in_order:
            assert idxs == sorted(idxs), "InOrderDelivery"
        assert all(e == core.epoch for e, _ in self.handed_out), "NoStaleEpochDelivery"

    # ------------------------------------------------------------------ the main process --
    def try_put_index(self) -> bool:
        core = self.core
        w = core.next_worker()
        if w is None:
            return False
        index = next(self.sampler, StopIteration)
        if index is StopIteration:
            return False
        idx = core.try_put_index(w)
        self.in_flight.add(idx)
        self.workers[w].index_queue.append((idx, index))
        return True

    def get_event(self) -> tuple[int, int, Kind, Any]:
        """Run world steps until the main process has something to read; handle deaths."""
        core = self.core
        while True:
            self.fail_if_dead_dependency()  # the shell's _check_dead, before every wait
            evs = self.events()
            steps = self.worker_steps()
            n = len(evs) + len(steps)
            real = n - (1 if self.cfg.timeout else 0)
            hung = any(sw.hung for sw in self.workers)
            assert real > 0 or hung, "NoDeadlock: main waits and nothing can happen"
            assert n > 0, "IterationTerminates: a worker hangs and no timeout is set"
            pick = self.choose(n)
            if pick < len(steps):
                steps[pick]()
                continue
            kind, w = evs[pick - len(steps)]
            if kind == "timeout":
                core.timeout()
                raise Failed(w)
            if kind == "death":
                self.workers[w].death_seen = True
                if core.depends_on(w):
                    core.detect_worker_failure([w])
                    raise Failed(w)
                continue
            idx, k, payload = self.workers[w].result_queue.popleft()
            return w, idx, k, payload

    def fail_if_dead_dependency(self) -> None:
        """A death seen earlier (of a then-retired worker) fails the iterator once it matters."""
        core = self.core
        dead = [w for w, sw in enumerate(self.workers) if sw.death_seen and core.depends_on(w)]
        if dead:
            core.detect_worker_failure(dead)
            raise Failed(dead[0])

    def next(self) -> Any:
        """One next(): the shell's _next_data. Returns a payload or raises StopIteration."""
        core = self.core
        self.fail_if_dead_dependency()
        while True:
            self.check()
            action = core.next_action()
            if action is Action.MAIN_SKIP_EXHAUSTED:
                core.skip_exhausted()
            elif action is Action.MAIN_STOP_ITERATION:
                if core.phase is Phase.RUNNING and self.try_put_index():
                    continue
                # NoSilentLoss / ExactlyOnce: every task sent was handed out or retired.
                sent = set(range(core.send_idx))
                handed = {i for _, i in self.handed_out}
                assert sent == handed | core.retired, "NoSilentLoss"
                if not self.cfg.iterable and not self.killed_any:
                    assert handed == set(range(self.cfg.num_tasks)), "ExactlyOnce"
                if self.cfg.iterable and not self.killed_any:
                    assert len(handed) == sum(self.cfg.shards), "ExactlyOnce"
                if core.stop_iteration():
                    self.shutdown()
                raise StopIteration
            elif action is Action.MAIN_MARK_WORKER_UNAVAILABLE:
                w = core.exhausted_worker
                assert w is not None
                if core.mark_worker_as_unavailable(w):
                    self.workers[w].index_queue.append(None)
                self.try_put_index()
            elif action is Action.MAIN_PROCESS_DATA:
                d = core.process_data()
                epoch, idx = d.payload
                assert idx == d.idx
                self.handed_out.append((epoch, d.idx))
                self.check()
                self.try_put_index()
                return d
            else:
                w, idx, kind, payload = self.get_event()
                core.get_data(w, idx, kind, payload)
                self.in_flight.discard(idx)

    def start_epoch(self, first: bool) -> None:
        core = self.core
        self.handed_out = []
        self.in_flight = set()
        self.fetched = {}
        self.new_sampler()
        if not first:
            if core.phase is Phase.RUNNING:
                assert not core.drop_iterator()
            for w in core.resume_iteration():
                self.workers[w].index_queue.append(RESUME)
            while core.phase is Phase.RESUMING:
                w, _, kind, _ = self.get_event()
                core.drain_resume(w, kind)
        for _ in range(core.max_tasks):
            self.try_put_index()

    def shutdown(self) -> None:
        """The seeds' order, then check nothing can be handed out any more."""
        core = self.core
        if core.workers_done_event:
            return  # already shut down (idempotent, like the shell's)
        while not core.shutdown:
            core.drop_iterator()
        if core.pin_memory:
            core.set_pin_done()
            core.join_pin_thread()
        core.set_workers_done()
        for w in core.needs_sentinel():
            core.put_sentinel(w)
            self.workers[w].index_queue.append(None)
        for w, sw in enumerate(self.workers):
            # Workers that are alive drain their queues (skipping tasks: done event) and exit;
            # a hung one does not: the bounded join runs out and it is terminated, then reaped.
            if sw.alive and sw.hung and not core.worker_exited[w]:
                core.terminate_worker(w)
            core.join_worker(w)
            assert core.worker_exited[w], "ShutdownCompletes"
        try:
            core.process_data()
        except ProtocolViolation:
            pass
        else:
            raise AssertionError("NoDeliveryAfterShutdown")
