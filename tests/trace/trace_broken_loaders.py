"""Deliberately broken reference loaders: each gets one protocol decision wrong.

Each is ``reference.DataLoader`` with a ``ProtocolCore`` subclass (and, where the wrong move is
the shell's, an iterator subclass). Their traces must be rejected by ``loaderspec trace-check``
at the record where they leave the spec (tests/trace/test_broken.py). They are played in a
sandbox child only: the iterator swaps ``reference.shell.ProtocolCore`` while it is built, which
would be unsafe in a process that builds other loaders concurrently.
"""

from __future__ import annotations

from typing import Any

from loaderspec.vocabulary import Action
from reference import shell
from reference.core import Delivery, Kind, Phase, ProtocolCore, Request, Step
from reference.loader import DataLoader
from reference.shell import MultiProcessingIter


class _PastPrefetchCore(ProtocolCore):
    """One task more than prefetch_factor * num_workers may be outstanding (and is sent: the
    prefetch fills the larger window)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_tasks += 1
        self._put_budget = self.max_tasks


class _ReorderCore(ProtocolCore):
    """in_order=True, but each result is handed out as soon as it arrives."""

    def get_data(self, worker: int, idx: int, kind: Kind, payload: Any = None) -> None:
        super().get_data(worker, idx, kind, payload)
        if kind in (Kind.DATA, Kind.ERROR):
            self._ready = idx


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
            shell.ProtocolCore = core_cls  # type: ignore[misc]
            try:
                super().__init__(loader)
            finally:
                shell.ProtocolCore = ProtocolCore  # type: ignore[misc]

    return BrokenIter


def _loader(name: str, it: type[MultiProcessingIter]) -> type[DataLoader]:
    def _get_iterator(self: DataLoader) -> Any:
        return it(self)

    return type(name, (DataLoader,), {"_get_iterator": _get_iterator})


PastPrefetch = _loader("PastPrefetch", _iterator(_PastPrefetchCore))
Reorder = _loader("Reorder", _iterator(_ReorderCore))
Duplicate = _loader("Duplicate", _iterator(_DuplicateCore))
SkipSentinel = _loader("SkipSentinel", _iterator(_SkipSentinelCore))
StaleEpoch = _loader("StaleEpoch", _iterator(_StaleEpochCore))
