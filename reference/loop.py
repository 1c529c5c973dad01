"""The one loop that runs ``ProtocolCore``: ask it what to do, do the IO through a port, take it.

Owns the IO that goes with each main-process action and its order around the core step (a put
is logged before it happens, a get after: docs/architecture.md "Trace records"), and ``take``,
the one helper that makes a core call and writes its trace record from ``core.last``, so the two
cannot drift; a worker's steps (``reference/worker_core.py``) are taken by it too. Makes no
protocol decision: what happens next is always ``core.next_action()``.

Two ports run it: the IO shell (``reference/shell.py``: processes, pipes, the pin thread) and
the test model (``tests/reference/refcore_model.py``: a simulated world whose every
interleaving Hypothesis picks). Both call these functions; neither has a copy of the loop.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from loaderspec.reference.core import Delivery, Failure, ProtocolCore
from loaderspec.reference.messages import (
    RESUME,
    SENTINEL,
    Arrived,
    Exited,
    IndexMessage,
    Origin,
    PinDied,
    RecvFailed,
    Task,
    TimedOut,
    Traced,
    WaitEvent,
)
from loaderspec.reference.steps import Step
from loaderspec.reference.transitions import OBSERVED_FAULT_METHOD, Request
from loaderspec.reference.worker_core import WORKER_METHOD, WorkerCore

from loaderspec import tracewriter
from loaderspec.vocabulary import CORE_METHOD, USER_CORE_METHOD, Action, UserAction


class IteratorFailed(Exception):
    """The iterator failed (fail-stop); it is shut down. ``failure`` says why."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(failure)


class Port(Protocol):
    """The IO a main process does for the core; each method does one thing and decides nothing."""

    def next_index(self) -> Any:
        """The sampler's next item. Raises StopIteration when it ran dry."""
        ...

    def send(self, worker: int, message: IndexMessage) -> None:
        """Put ``message`` (a Task, RESUME or SENTINEL) into ``worker``'s index queue."""
        ...

    def wait(self) -> WaitEvent:
        """Block until a result arrives, workers are found ended, a read fails, the pin thread
        is found dead, or the timeout runs out (reporting the workers found ended by then)."""
        ...

    def set_pin_done(self, take_step: Callable[[], None]) -> None:
        """Set the pin thread's done event and wake it; call ``take_step()`` where the step is
        ordered with the thread's own looks at the event."""
        ...

    def join_pin_thread(self) -> None:
        """Wait for the pin thread to end."""
        ...

    def set_workers_done(self, take_step: Callable[[], None]) -> None:
        """Set ``workers_done_event``; call ``take_step()`` where the step is ordered with the
        workers' looks at the event."""
        ...

    def reap(self, workers: list[int], *, grace: bool, block: bool) -> Iterator[tuple[int, bool]]:
        """Join ``workers``: with ``grace``, wait a bounded time for them to exit; kill those
        still running; with ``block``, wait (bounded) for the killed ones to be gone. Yields
        ``(worker, killed)`` as each is reaped; ``killed``: our kill ended it."""
        ...

    def shut_down(self) -> None:
        """Carry out the shutdown the core decided (``shut_down(core, port)``, then free the
        port's own resources). Idempotent."""
        ...


def take(
    core: ProtocolCore | WorkerCore,
    action: Action | UserAction,
    *args: Any,
    origin: Origin | None = None,
    at_write: bool = False,
    t: int | None = None,
) -> Any:
    """Take ``action`` (the core's method: ``CORE_METHOD[action]``, for the fault the main
    process observes itself ``OBSERVED_FAULT_METHOD[action]``, a worker's ``WORKER_METHOD``)
    and write its trace record (``origin``: that of the message the step moved; ``t``: when
    the step happened, if before now). Where the step's effect is the port's, the record is
    written there, with the step's post-state: ``at_write``, by the port's ``send`` just
    before it writes (``log_write``); MainProcessData's where the shell hands the batch out
    (``hand_out``), at the time of the step. A step the core says is none of the spec's
    (``last`` is None: a worker's error that does not pickle) writes no record. A user's
    checkpoint step (``USER_CORE_METHOD``) writes a ``RecordType.USER`` record: the state
    the method returns, with the core's epoch and post-state.

    Raises:
        ProtocolViolation: the action is not enabled; nothing changed and nothing was written.
    """
    cls = type(core)
    method = (_METHODS.get(cls) or _methods(cls))[action]
    result = method(core, *args)
    if tracewriter.ENABLED:
        if isinstance(action, UserAction):
            assert isinstance(core, ProtocolCore)  # the main process's
            tracewriter.emit_user(action, result, epoch=core.epoch, state=core.snapshot())
            return result
        step = core.last
        if step is None:
            return result
        fields: dict[str, Any] = {
            "epoch": core.epoch,
            "worker": step.worker,
            "task": step.task,
            "kind": None if step.kind is None else step.kind.value,
            "state": core.snapshot(),
        }
        if action is _PROCESS:
            assert isinstance(core, ProtocolCore)  # a main-process step
            _HAND_OUTS[core] = {"t": time.monotonic_ns(), **fields}
        elif at_write:
            assert isinstance(core, ProtocolCore)
            _WRITES[core] = (action, fields)
        else:
            tracewriter.emit(action, origin=origin, t=t, **fields)
    return result


# The record of a step that sends (a task, a sentinel, a resume), taken and not yet written:
# the port's send writes it just before its write (log_write), so a message the shell decides
# and never writes leaves no record of being sent.
_WRITES: weakref.WeakKeyDictionary[ProtocolCore, tuple[Action, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)


def log_write(core: ProtocolCore) -> None:
    """Called by a port's ``send`` at its point of effect, just before it writes: the record of
    the step that decided the message (one record for a resume sent to every worker)."""
    pending = _WRITES.pop(core, None)
    if pending is not None:
        tracewriter.emit(pending[0], **pending[1])


# MainProcessData records taken and not yet written: the shell writes each where it hands the
# batch out (hand_out), so its origin is that of what the user gets, not what the core chose.
_HAND_OUTS: weakref.WeakKeyDictionary[ProtocolCore, dict[str, Any]] = weakref.WeakKeyDictionary()


def hand_out(
    core: ProtocolCore, payload: Any, *, user: Callable[[Any], str | None] | None = None
) -> Any:
    """The point of effect of MainProcessData: ``payload`` is what the shell hands the user now
    (the core's ``Delivery.payload``, unless the shell is broken). Writes the step's record, at
    the time the core took it, with the origin that travelled with this payload (the ghost:
    ``Traced``) and ``user(payload)`` (the fingerprint of the user's state it brought), and
    returns the payload itself."""
    origin = None
    if type(payload) is Traced:
        payload, origin = payload
    elif not tracewriter.ENABLED:  # the per-batch path when not tracing
        return payload
    fields = _HAND_OUTS.pop(core, None)
    if fields is not None:
        brought = None if user is None else user(payload)
        tracewriter.emit(_PROCESS, origin=origin, user=brought, **fields)
    return payload


# Each action's core method, by its vocabulary name: a step is one lookup in its core class's
# table (Action and classes hash by identity) and a call. A class's table is made at its first
# step, so a subclass's override (a broken core in the tests) is the one called.
_TABLES = (CORE_METHOD, OBSERVED_FAULT_METHOD, WORKER_METHOD, USER_CORE_METHOD)
_NAMES: dict[Action | UserAction, str] = {a: n for table in _TABLES for a, n in table.items()}
_METHODS: dict[type, dict[Action | UserAction, Callable[..., Any]]] = {}


def _methods(cls: type) -> dict[Action | UserAction, Callable[..., Any]]:
    table = _METHODS[cls] = {a: getattr(cls, n) for a, n in _NAMES.items() if hasattr(cls, n)}
    return table


# The per-batch actions as module names: ``Action.X`` is a descriptor call each time.
_TRY_PUT, _GET, _PROCESS = Action.MAIN_TRY_PUT_INDEX, Action.MAIN_GET_DATA, Action.MAIN_PROCESS_DATA
_CALL = Action.MAIN_CALL_NEXT
_JOIN = Action.MAIN_JOIN_WORKER
_NEXT = Request.NEXT


# ------------------------------------------------------------- the IO of each action ---------
def _call_next(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, _CALL)
    if core.failure is not None:  # fail-stop: the call raises the failure again, at once
        raise IteratorFailed(core.failure)


def _fail(core: ProtocolCore, port: Port) -> None:
    port.shut_down()
    assert core.failure is not None  # the action just taken failed the iterator
    raise IteratorFailed(core.failure)


def _on_other_event(core: ProtocolCore, port: Port, event: WaitEvent) -> None:
    """What a wait brought instead of a result. Ended workers, the timeout (with the workers
    found ended by then) and the pin thread's death are events: the core decides at its next
    step what they mean (a death it depends on wins over the timeout). A read that failed is a
    step of its own (FaultRecvError), and fatal."""
    match event:
        case Exited(workers):
            for worker in workers:
                core.worker_ended(worker)
        case TimedOut(_, ended):
            for worker in ended:
                core.worker_ended(worker)
            core.deadline_passed()
        case RecvFailed(worker, detail):
            take(core, Action.FAULT_RECV_ERROR, worker, detail)
            _fail(core, port)
        case PinDied(_, detail):
            core.pin_thread_died(detail)
        case _:
            raise TypeError(f"not an event of the port: {event!r}")


def _try_put_index(core: ProtocolCore, port: Port, step: Step) -> None:
    assert step.worker is not None
    try:
        index = port.next_index()
    except StopIteration:
        core.sampler_ran_dry()
        return
    idx = take(core, _TRY_PUT, step.worker, at_write=True)
    port.send(step.worker, Task(idx, index))


def _get_data(core: ProtocolCore, port: Port, step: Step) -> None:
    event = port.wait()
    if type(event) is Arrived:
        r = event.result
        if r.origin is None:  # not traced: the per-batch path
            take(core, _GET, event.worker, r.idx, r.kind, r.payload)
        else:
            traced = Traced(r.payload, r.origin)
            take(core, _GET, event.worker, r.idx, r.kind, traced, origin=r.origin)
    else:
        _on_other_event(core, port, event)


def _drain_resume(core: ProtocolCore, port: Port, step: Step) -> None:
    event = port.wait()
    if type(event) is Arrived:
        r = event.result
        take(core, Action.MAIN_DRAIN_RESUME, event.worker, r.kind, r.payload, origin=r.origin)
    else:
        _on_other_event(core, port, event)


def _process_data(core: ProtocolCore, port: Port, step: Step) -> Delivery:
    delivery: Delivery = take(core, _PROCESS)
    return delivery


def _skip_exhausted(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, Action.MAIN_SKIP_EXHAUSTED)


def _mark_worker_unavailable(core: ProtocolCore, port: Port, step: Step) -> None:
    assert step.worker is not None
    sends = not core.persistent_workers  # the None sentinel goes out now (mark's result)
    if take(core, Action.MAIN_MARK_WORKER_UNAVAILABLE, step.worker, at_write=sends):
        port.send(step.worker, SENTINEL)


def _stop_iteration(core: ProtocolCore, port: Port, step: Step) -> None:
    if take(core, Action.MAIN_STOP_ITERATION):
        port.shut_down()
    raise StopIteration


def _detect_worker_failure(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, Action.MAIN_DETECT_WORKER_FAILURE)
    _fail(core, port)


def _detect_pin_failure(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, Action.MAIN_DETECT_PIN_FAILURE)
    _fail(core, port)


def _timeout(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, Action.MAIN_TIMEOUT)
    _fail(core, port)


def _resume_iteration(core: ProtocolCore, port: Port, step: Step) -> None:
    for worker in take(core, Action.MAIN_RESUME_ITERATION, at_write=True):
        port.send(worker, RESUME)


def _drop_iterator(core: ProtocolCore, port: Port, step: Step) -> None:
    take(core, Action.MAIN_DROP_ITERATOR)


def _set_pin_done(core: ProtocolCore, port: Port, step: Step) -> None:
    port.set_pin_done(lambda: take(core, Action.MAIN_SET_PIN_DONE))


def _join_pin_thread(core: ProtocolCore, port: Port, step: Step) -> None:
    port.join_pin_thread()
    take(core, Action.MAIN_JOIN_PIN_THREAD)


def _set_workers_done(core: ProtocolCore, port: Port, step: Step) -> None:
    port.set_workers_done(lambda: take(core, Action.MAIN_SET_WORKERS_DONE))


def _put_sentinel(core: ProtocolCore, port: Port, step: Step) -> None:
    assert step.worker is not None
    take(core, Action.MAIN_PUT_SENTINEL, step.worker, at_write=True)
    port.send(step.worker, SENTINEL)


def _join_workers(core: ProtocolCore, port: Port, step: Step) -> None:
    wait = core.waits_for_workers
    reap(core, port, grace=wait, block=wait)


# The IO of every action next_action() may answer (MainTerminateWorker comes with a reap, and
# FaultRecvError with a wait).
_PERFORM: dict[Action, Callable[[ProtocolCore, Port, Step], Any]] = {
    Action.MAIN_CALL_NEXT: _call_next,
    Action.MAIN_TRY_PUT_INDEX: _try_put_index,
    Action.MAIN_GET_DATA: _get_data,
    Action.MAIN_PROCESS_DATA: _process_data,
    Action.MAIN_SKIP_EXHAUSTED: _skip_exhausted,
    Action.MAIN_MARK_WORKER_UNAVAILABLE: _mark_worker_unavailable,
    Action.MAIN_STOP_ITERATION: _stop_iteration,
    Action.MAIN_DETECT_WORKER_FAILURE: _detect_worker_failure,
    Action.MAIN_DETECT_PIN_FAILURE: _detect_pin_failure,
    Action.MAIN_TIMEOUT: _timeout,
    Action.MAIN_RESUME_ITERATION: _resume_iteration,
    Action.MAIN_DRAIN_RESUME: _drain_resume,
    Action.MAIN_DROP_ITERATOR: _drop_iterator,
    Action.MAIN_SET_PIN_DONE: _set_pin_done,
    Action.MAIN_JOIN_PIN_THREAD: _join_pin_thread,
    Action.MAIN_SET_WORKERS_DONE: _set_workers_done,
    Action.MAIN_PUT_SENTINEL: _put_sentinel,
    Action.MAIN_JOIN_WORKER: _join_workers,
}


# ------------------------------------------------------------- the loop ----------------------
def _run(core: ProtocolCore, port: Port) -> Delivery | None:
    """Take the core's steps until its request is served (``next()``: by a hand-out and the
    refill after it); returns the hand-out, if there was one. A shutdown ends with one reap:
    what it could not reap is reaped later (``reap``)."""
    delivery = None
    while (step := core.next_action()) is not None:
        action = step.action
        out = _PERFORM[action](core, port, step)
        if action is _PROCESS:
            delivery = out
        elif action is _JOIN:
            break
    return delivery


def start_epoch(core: ProtocolCore, port: Port, *, resume: bool) -> None:
    """``iter()``: prefetch a new iterator's first tasks, or resume persistent workers (a new
    epoch: break off the old one if it runs, resume, drain, prefetch).

    Raises:
        IteratorFailed: a worker died, the pin thread died, a read failed or the timeout ran out
            while draining the resume acks.
    """
    core.ask(Request.RESUME if resume else Request.PREFETCH)
    _run(core, port)


def next_batch(core: ProtocolCore, port: Port) -> Delivery:
    """``next()``: MainCallNext, the steps up to the next hand-out, and the refill the core asks
    for after it.

    Raises:
        StopIteration: nothing is left (and the workers are shut down unless persistent).
        IteratorFailed: a fatal error (a worker the iterator depends on died, the pin thread
            died, a read failed, the timeout ran out), now or in an earlier call (fail-stop:
            every later call raises it again, reading nothing).
        ProtocolViolation: the core cannot serve ``next()`` now (a dropped iterator, say).
    """
    core.ask(_NEXT)
    delivery = _run(core, port)
    if delivery is None:
        raise RuntimeError(f"the protocol core served next() with no hand-out: {core.snapshot()}")
    return delivery


def shut_down(core: ProtocolCore, port: Port) -> None:
    """Let go: the shutdown steps in the seeds' order, then one reap of the workers (bounded;
    after a failure it does not wait, and ``reap`` collects the rest later)."""
    core.ask(Request.SHUTDOWN)
    _run(core, port)


def reap(core: ProtocolCore, port: Port, *, grace: bool, block: bool) -> None:
    """Reap the workers not joined yet, taking MainTerminateWorker for each our kill ended and
    MainJoinWorker for each as it is reaped."""
    for worker, killed in port.reap(core.unjoined(), grace=grace, block=block):
        if killed:
            take(core, Action.MAIN_TERMINATE_WORKER, worker)
        take(core, Action.MAIN_JOIN_WORKER, worker)
