"""A simulated worker for driving ``WorkerCore``: a script of messages and fetch outcomes, no IO.

``SimWorker.run`` feeds the core what ``reference/worker.py`` feeds it (a message off the index
queue, whether the done event was set when it was taken, and the fetcher's outcome when the
core asks for one) and takes every step with ``reference.loop.take``, as the worker does, so
the records are the one helper's. ``expected`` is torch's ``_worker_loop`` written out plainly
(its protocol decisions, in the order torch takes them): the oracle the core must agree with.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loaderspec.reference import loop
from loaderspec.reference.messages import NO_TASK, RESUME, SENTINEL, IndexMessage, Result, Task
from loaderspec.reference.steps import Kind
from loaderspec.reference.worker_core import WorkerCore

from loaderspec.vocabulary import Action

INIT_ERROR = "init error"  # what worker_init_fn raised, wrapped (a stand-in)
PICKLE_ERROR = "pickle error"  # the error sent instead of a result that does not pickle


@dataclass(frozen=True)
class Script:
    """What a worker is given: messages, with the done event's state as each is taken, and the
    fetcher's outcome for each fetch it runs (taken in order)."""

    messages: tuple[tuple[IndexMessage, bool], ...]
    outcomes: tuple[tuple[Kind, Any], ...]  # (DATA, batch), (ERROR, err), (EXHAUSTED, err)
    iterable: bool
    init_error: bool = False
    unpicklable: frozenset[int] = frozenset()  # task idxs whose result does not pickle


@dataclass
class SimWorker:
    """Runs a script through the core, the way ``worker_loop`` does."""

    script: Script
    core: WorkerCore = field(init=False)
    sent: list[Result] = field(default_factory=list)  # what went out on the result queue
    steps: list[tuple[Action, int | None, Kind | None]] = field(default_factory=list)
    fetches: int = 0  # how often the fetcher ran

    def __post_init__(self) -> None:
        self.core = WorkerCore(0, iterable=self.script.iterable, traced=True)
        if self.script.init_error:
            self.core.init_failed(INIT_ERROR)

    def _take(self, action: Action, *args: Any, **kwargs: Any) -> Any:
        out = loop.take(self.core, action, *args, **kwargs)
        last = self.core.last
        if last is not None:
            self.steps.append((last.action, last.task, last.kind))
        return out

    def run(self) -> None:
        outcomes: Iterator[tuple[Kind, Any]] = iter(self.script.outcomes)
        for message, done in self.script.messages:
            if self.core.exited:
                return
            step = self.core.next_action(message, done)
            if step.action is Action.WORKER_FETCH:
                assert isinstance(message, Task)
                kind, payload = step.kind, None
                if kind is None:
                    kind, payload = next(outcomes, (Kind.DATA, ("batch", message.idx)))
                    self.fetches += 1
                result = self._take(Action.WORKER_FETCH, message.idx, kind, payload)
                if result.idx in self.script.unpicklable:
                    result = self._take(Action.FAULT_PUT_ERROR, result, PICKLE_ERROR)
                self._take(Action.WORKER_PUT, result, origin=result.origin)
                self.sent.append(result)
            elif step.action is Action.WORKER_SKIP_INDEX:
                self._take(step.action, step.task)
            elif step.action is Action.WORKER_ACK_RESUME:
                self.sent.append(self._take(step.action))
            else:
                self._take(step.action)


def expected(script: Script) -> tuple[list[Result], int]:
    """torch's ``_worker_loop``, plainly: the results it sends, and how often it fetches."""
    outcomes = iter(script.outcomes)
    sent: list[Result] = []
    epoch, iteration_end, fetches = 0, False, 0
    init_error = INIT_ERROR if script.init_error else None
    for message, done in script.messages:
        if message == RESUME:
            epoch, iteration_end = epoch + 1, False
            sent.append(Result(NO_TASK, Kind.RESUME, None, (0, NO_TASK, epoch)))
            continue
        if message is SENTINEL:
            break
        assert isinstance(message, Task)
        if done or iteration_end:
            continue
        origin = (0, message.idx, epoch)
        if init_error is not None:
            result = Result(message.idx, Kind.ERROR, init_error, origin)
            init_error = None
        else:
            kind, payload = next(outcomes, (Kind.DATA, ("batch", message.idx)))
            fetches += 1
            if kind is Kind.EXHAUSTED and script.iterable:
                # (its payload travels: the user's state as the shard ran dry, as torchdata's
                # worker sends its state delta with the exhaustion)
                iteration_end = True
            elif kind is Kind.EXHAUSTED:
                kind = Kind.ERROR
            result = Result(message.idx, kind, payload, origin)
        if message.idx in script.unpicklable:
            result = Result(message.idx, Kind.ERROR, PICKLE_ERROR, origin)
        sent.append(result)
    return sent, fetches
