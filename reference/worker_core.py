"""A worker's side of the DataLoader protocol, as a pure state machine.

Rules of this file (as ``reference/core.py``'s, for the other end of the pipes):

* Everything that decides what a worker does with a message off its index queue lives here:
  exit on the sentinel, acknowledge a resume (and start the new epoch), skip a task once the
  loader is done or the shard ran dry, fetch otherwise; what a fetch's outcome means (a
  ``StopIteration`` is exhaustion for an ``IterableDataset``, an error for a map-style one);
  that an error in ``worker_init_fn`` is the result of the worker's first task; what goes out
  instead of a result that does not pickle. Nothing else in ``reference/`` decides a worker's step.
* This file does not know pipes, processes, torch, the dataset, the fetcher or the clock, and
  imports nothing that does. ``reference/worker.py`` does the IO: it reads a message, asks
  ``next_action``, does what the step needs (runs the fetcher, writes a result) and takes the
  step with ``reference.loop.take``, the helper that also writes the main process's records:
  one call, one step, one record, from ``last`` and ``snapshot()``.
* Every action method is one worker action of ``spec/DataLoader.tla`` (``WORKER_METHOD``); a
  method whose action is not enabled raises ``ProtocolViolation`` and leaves the state unchanged.

Theory of operation (torch's ``_worker_loop``): a worker starts in epoch 0. ``RESUME`` (torch's
``_ResumeIteration``) starts the next epoch: ``iteration_end`` is cleared and the worker answers
with the resume ack (``Result.resume_ack``), which names no task. A task taken while
``workers_done_event`` is set, or after this epoch's shard ran dry, is dropped
(``WorkerSkipIndex``). Otherwise it is fetched (``WorkerFetch``) and its result put
(``WorkerPut``); the init error, if there was one, is that first fetch's result and the fetcher
is not run (torch's ``init_exception``).
"""

from __future__ import annotations

from typing import Any

from loaderspec.reference.messages import (
    NO_TASK,
    RESUME,
    SENTINEL,
    IndexMessage,
    Origin,
    Result,
    Task,
)
from loaderspec.reference.steps import Kind, ProtocolViolation, Step

from loaderspec.vocabulary import WORKER_STATE_ACTIONS, Action

_A = Action
_FETCH, _PUT = _A.WORKER_FETCH, _A.WORKER_PUT
_DATA, _ERROR, _EXHAUSTED = Kind.DATA, Kind.ERROR, Kind.EXHAUSTED
# Step(...) without NamedTuple's Python-level __new__, for the per-batch steps (as core.py).
_new_step = tuple.__new__

# The worker core's method of each action it takes (the main process's are CORE_METHOD's).
WORKER_METHOD: dict[Action, str] = {
    _A.WORKER_FETCH: "fetch",
    _A.WORKER_PUT: "put",
    _A.WORKER_ACK_RESUME: "ack_resume",
    _A.WORKER_SKIP_INDEX: "skip_index",
    _A.WORKER_EXIT: "exit",
    _A.FAULT_PUT_ERROR: "put_error",
}


class WorkerCore:
    """One worker's protocol state and its transitions (one method per spec action)."""

    def __init__(self, worker: int, *, iterable: bool, traced: bool = False) -> None:
        self.worker = worker
        self.iterable = iterable  # an IterableDataset: a fetch may find the shard dry
        self.traced = traced  # results carry their origin (the payload-origin ghost)
        self.epoch = 0
        self.iteration_end = False  # this epoch's shard ran dry (the spec's variable)
        self.exited = False
        self.init_error: Any = None  # worker_init_fn's error: the first task's result
        self.last: Step | None = None  # the step the last action took (None: no spec step)

    def snapshot(self) -> dict[str, Any]:
        """The worker's state as the last step's trace record carries it
        (``loaderspec.vocabulary.WORKER_STATE_FIELDS`` for ``WORKER_STATE_ACTIONS``)."""
        last = self.last
        if last is not None and last.action in WORKER_STATE_ACTIONS:
            return {"iteration_end": self.iteration_end}
        return {}

    def _violation(self, action: Action, why: str) -> ProtocolViolation:
        state = {"worker": self.worker, "epoch": self.epoch, "exited": self.exited}
        return ProtocolViolation(action, {**state, "iteration_end": self.iteration_end}, why)

    def _check(self, action: Action, why: str | None) -> None:
        """Refuse ``action`` where its guard said why it is not enabled (nothing changes)."""
        if why is not None:
            raise self._violation(action, why)

    def _origin(self, idx: int) -> Origin | None:
        return (self.worker, idx, self.epoch) if self.traced else None

    # ------------------------------------------------------ events and the next step --------
    def init_failed(self, error: Any) -> None:
        """Event: ``worker_init_fn`` or the fetcher's creation raised ``error`` (wrapped); it
        becomes the result of the worker's first task, in its turn (torch's init_exception)."""
        self.init_error = error

    def next_action(self, message: IndexMessage, done: bool) -> Step:
        """The step to take for ``message``, just read off the index queue; ``done``: whether
        ``workers_done_event`` was set when it was taken. A ``WorkerFetch`` whose ``kind`` is
        already set needs no fetch: its result is decided (the init error).

        Raises:
            ProtocolViolation: the worker has exited; nothing changed.
        """
        why = _alive_guard(self)
        if why is not None:
            raise self._violation(_A.WORKER_EXIT, why)
        if message is SENTINEL:
            return Step(_A.WORKER_EXIT, self.worker)
        if message == RESUME:
            return Step(_A.WORKER_ACK_RESUME, self.worker)
        assert isinstance(message, Task)
        if done or _fetch_guard(self) is not None:  # (the spec's WorkerSkipIndex)
            return Step(_A.WORKER_SKIP_INDEX, self.worker, message.idx)
        kind = None if self.init_error is None else _ERROR
        return _new_step(Step, (_FETCH, self.worker, message.idx, kind))

    # ---------------------------------------------------------------- actions ---------------
    def ack_resume(self) -> Result:
        """WorkerAckResume: the next epoch begins (the shard is fresh); returns the ack to send."""
        self._check(_A.WORKER_ACK_RESUME, _alive_guard(self))
        self.epoch += 1
        self.iteration_end = False
        self.last = Step(_A.WORKER_ACK_RESUME, self.worker)
        return Result.resume_ack(self._origin(NO_TASK))

    def skip_index(self, idx: int) -> None:
        """WorkerSkipIndex: task ``idx`` is dropped (done event set, or the shard ran dry)."""
        self._check(_A.WORKER_SKIP_INDEX, _alive_guard(self))
        self.last = Step(_A.WORKER_SKIP_INDEX, self.worker, idx)

    def fetch(self, idx: int, kind: Kind | None = None, payload: Any = None) -> Result:
        """WorkerFetch: task ``idx``'s result, from what the fetcher gave (``DATA`` and the batch,
        ``ERROR`` and the wrapped error, ``EXHAUSTED`` and the wrapped ``StopIteration``); with
        an init error pending, that error is the result (and the fetcher was not run).

        Raises:
            ProtocolViolation: the worker exited or this epoch's shard ran dry; nothing changed.
        """
        why = _fetch_guard(self)
        if why is not None:
            raise self._violation(_FETCH, why)
        if self.init_error is not None:
            kind, payload, self.init_error = _ERROR, self.init_error, None
        elif kind is _EXHAUSTED:
            if self.iterable:  # (its payload: the dataset's state as the shard ran dry)
                self.iteration_end = True
            else:  # a map-style dataset's StopIteration is an error, raised in its turn (torch)
                kind = _ERROR
        elif kind is None:
            raise self._violation(_FETCH, f"task {idx}'s fetch gave no outcome")
        self.last = _new_step(Step, (_FETCH, self.worker, idx, kind))
        return Result(idx, kind, payload, self._origin(idx))

    def put(self, result: Result) -> None:
        """WorkerPut: ``result`` goes on the result queue (taken just before it is written)."""
        self.last = _new_step(Step, (_PUT, self.worker, result.idx, result.kind))

    def put_error(self, result: Result, error: Any) -> Result:
        """``result`` does not pickle: returns what is sent instead, its ``error``, so the main
        process raises it in its turn rather than wait for a result that never comes (torch's
        feeder thread dies on it and the loader hangs, pytorch#142884). For a batch this is the
        spec's FaultPutError; an error that does not pickle is no spec step (``last`` is None)."""
        data = result.kind is _DATA
        self.last = Step(_A.FAULT_PUT_ERROR, self.worker, result.idx) if data else None
        return Result(result.idx, _ERROR, error, result.origin)

    def exit(self) -> None:
        """WorkerExit: the None sentinel came; the worker ends cleanly."""
        self.exited = True
        self.last = Step(_A.WORKER_EXIT, self.worker)


# The guards, each written once (as the main core's ``GUARDS``): None, or why the action is not
# enabled. A method refuses what its guard refuses; ``next_action`` asks the same guards. (The
# done event is the main process's: a task taken while it is set is skipped, never fetched.)
def _alive_guard(core: WorkerCore) -> str | None:
    return "the worker has exited" if core.exited else None


def _fetch_guard(core: WorkerCore) -> str | None:
    # The spec's Fetchable, but for the done event: alive, and this epoch's shard not dry.
    why = _alive_guard(core)
    return "its shard ran dry this epoch" if why is None and core.iteration_end else why
