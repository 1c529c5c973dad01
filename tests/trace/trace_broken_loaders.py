"""Deliberately broken reference loaders: each gets one protocol decision, or one effect of
the shell, wrong.

Each is ``reference.DataLoader`` with a ``ProtocolCore`` subclass (a wrong decision), or an
iterator subclass or a worker function swapped in (a wrong effect: the core decides right and
the shell does something else: the trace's records of effects are written where they happen).
Their traces must be rejected by ``loaderspec trace-check``
at the record where they leave the spec (tests/trace/test_broken.py). They are played in a
sandbox child only: the iterator swaps ``reference.shell.ProtocolCore`` while it is built, which
would be unsafe in a process that builds other loaders concurrently.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

from loaderspec.reference import loop, shell, worker
from loaderspec.reference.core import Delivery, ProtocolCore
from loaderspec.reference.loader import DataLoader
from loaderspec.reference.messages import SENTINEL, IndexMessage, Result
from loaderspec.reference.shell import MultiProcessingIter
from loaderspec.reference.steps import Kind, Step
from loaderspec.reference.transitions import Phase, Request
from loaderspec.reference.worker_core import WorkerCore

from loaderspec.vocabulary import Action


class _PastPrefetchCore(ProtocolCore):
    """One task more than prefetch_factor * num_workers may be outstanding (and is sent: the
    prefetch fills the larger window)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_tasks += 1
        self.put_budget = self.max_tasks


class _ReorderCore(ProtocolCore):
    """in_order=True, but each result is handed out as soon as it arrives."""

    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        super().get_data(worker, idx, kind, payload)
        if kind in (Kind.DATA, Kind.ERROR):
            self.ready = idx


class _DuplicateCore(ProtocolCore):
    """The first batch is handed out twice."""

    _dup: Delivery | None = None
    _done = False

    def next_action(self) -> Step | None:
        if self._dup is not None and self.request is Request.NEXT:
            return Step(Action.MAIN_PROCESS_DATA)
        return super().next_action()

    def process_data(self) -> Delivery:
        if self._dup is not None:
            dup, self._dup = self._dup, None
            self.request = Request.REFILL
            self.last = Step(Action.MAIN_PROCESS_DATA, dup.worker, dup.idx, dup.kind)
            return dup
        delivery = super().process_data()
        if not self._done:
            self._done, self._dup = True, delivery
        return delivery


class _SkipSentinelCore(ProtocolCore):
    """The last worker gets no None sentinel at shutdown (it is terminated after the join)."""

    def needs_sentinel(self) -> list[int]:
        return [w for w in super().needs_sentinel() if w != self.num_workers - 1]


class _StaleEpochCore(ProtocolCore):
    """Persistent workers: a new epoch starts without waiting for the resume acks, so results
    of the epoch that was broken off can be taken for the new epoch's."""

    def resume_iteration(self) -> list[int]:
        workers = super().resume_iteration()
        self.resume_pending = set()
        self.phase = Phase.RUNNING
        self.request = Request.PREFETCH
        return workers

    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        info = self.task_info.get(idx)
        if kind is Kind.RESUME or info is None or info[0] != worker or info[1]:
            # An ack nobody waits for, or a stale result that matches no task: dropped.
            self.last = Step(Action.MAIN_GET_DATA, worker, idx, kind)
            return
        super().get_data(worker, idx, kind, payload)


def _iterator(core_cls: type[ProtocolCore]) -> type[MultiProcessingIter]:
    class BrokenIter(MultiProcessingIter):
        def __init__(self, loader: Any) -> None:
            # Swapping the shell's core class for a broken one, for this constructor only.
            shell.ProtocolCore = core_cls  # type: ignore[misc]
            try:
                super().__init__(loader)
            finally:
                shell.ProtocolCore = ProtocolCore  # type: ignore[misc]  # (as above)

    return BrokenIter


# --- broken shells: the core decides right, the shell's effect is another --------------------
class _WrongPayloadIter(MultiProcessingIter):
    """Hands out the batch before the one the core chose (a stale buffer in the shell)."""

    _kept: Any = None

    def _next_data(self) -> Any:
        delivery = loop.next_batch(self._core, self)
        kept, self._kept = self._kept, delivery.payload
        payload = loop.hand_out(self._core, delivery.payload if kept is None else kept)
        if delivery.kind is Kind.ERROR:
            payload.reraise()
        return payload


class _LostSentinelIter(MultiProcessingIter):
    """Never writes the last worker's None sentinel at shutdown, though the core decided it
    (the bounded join then terminates that worker)."""

    def send(self, worker: int, message: IndexMessage) -> None:
        if message is SENTINEL and worker == len(self._index_conns) - 1 and self._core.shutdown:
            return  # the write is lost, and so is its record: it is written at the write
        super().send(worker, message)


class _EarlyJoinIter(MultiProcessingIter):
    """Reports every worker joined as soon as the sentinels are out, while each is still alive
    (then really reaps them, so nothing is left behind). Each worker is stopped (SIGSTOP) before
    its sentinel is written and continued after the false joins are logged: on an idle machine a
    worker would otherwise exit before the main process logs its join, and the false join would
    be a true one."""

    def send(self, worker: int, message: IndexMessage) -> None:
        if message is SENTINEL and self._core.shutdown:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pids[worker], signal.SIGSTOP)
        super().send(worker, message)

    def reap(self, workers: list[int], *, grace: bool, block: bool) -> Iterator[tuple[int, bool]]:
        try:
            yield from ((w, False) for w in workers)
        finally:
            for w in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pids[w], signal.SIGCONT)
        for _ in super().reap(workers, grace=grace, block=block):
            pass


class _StaleWorkerCore(WorkerCore):
    """A worker core that keeps its first batch and, once a new epoch began, puts that batch for
    its next task: a put of a stale-epoch result (with the origin it got where it was
    fetched)."""

    kept: Result | None = None

    def fetch(self, idx: int, kind: Kind | None = None, payload: Any = None) -> Result:
        result = super().fetch(idx, kind, payload)
        if self.kept is None:
            self.kept = result
        elif self.epoch > 0:
            kept, self.kept = self.kept, None
            return kept._replace(idx=idx)
        return result


class _StalePutIter(MultiProcessingIter):
    def __init__(self, loader: Any) -> None:
        worker.WorkerCore = _StaleWorkerCore  # type: ignore[misc]  # forked while swapped in
        try:
            super().__init__(loader)
        finally:
            worker.WorkerCore = WorkerCore  # type: ignore[misc]  # (as above)


def _loader(name: str, it: type[MultiProcessingIter]) -> type[DataLoader]:
    def _get_iterator(self: DataLoader) -> Any:
        return it(self)

    return type(name, (DataLoader,), {"_get_iterator": _get_iterator})


PastPrefetch = _loader("PastPrefetch", _iterator(_PastPrefetchCore))
Reorder = _loader("Reorder", _iterator(_ReorderCore))
Duplicate = _loader("Duplicate", _iterator(_DuplicateCore))
SkipSentinel = _loader("SkipSentinel", _iterator(_SkipSentinelCore))
StaleEpoch = _loader("StaleEpoch", _iterator(_StaleEpochCore))
WrongPayload = _loader("WrongPayload", _WrongPayloadIter)
LostSentinel = _loader("LostSentinel", _LostSentinelIter)
EarlyJoin = _loader("EarlyJoin", _EarlyJoinIter)
StalePut = _loader("StalePut", _StalePutIter)
