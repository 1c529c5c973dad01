"""The spec's guard of each main-process action: whether it is enabled, with its parameters.

Owns ``GUARDS``, each guard written once: None when the action is enabled, else the reason it is
not (a constant where ``next_action()`` asks on every step). The core's action method refuses
what its guard refuses (a caller may take any enabled step, as the spec allows), and
``next_action()`` asks the same guard of the step it proposes (``reference.proposals``). The
phase or stage an action needs is the tables' (``reference.transitions``), not a guard's.

A guard reads the core's fields and changes none; it knows no policy of torch's (when a put is
tried) and no IO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loaderspec.reference.steps import Kind
from loaderspec.reference.transitions import Phase

from loaderspec.vocabulary import Action

if TYPE_CHECKING:
    from loaderspec.reference.core import ProtocolCore

_A = Action
# What every batch's guards compare with, as module names (see reference.core).
_DATA, _ERROR, _RESUME = Kind.DATA, Kind.ERROR, Kind.RESUME
_ENDED = Phase.ENDED

Guard = Callable[..., str | None]


def call_guard(core: ProtocolCore) -> str | None:
    return "the main thread is inside a call already" if core.in_call else None


def put_guard(core: ProtocolCore) -> str | None:
    # The spec's put has no parameter: its worker is NextWorker, a function of the state
    # (next_worker(); None where no worker is eligible), which the method's worker must be.
    if core.sampler_dry:
        return "the sampler ran dry"
    if len(core.task_info) >= core.max_tasks:
        return "prefetch bound reached (the reorder window is full)"
    return None


def get_guard(core: ProtocolCore, worker: int, idx: int, kind: Kind) -> str | None:
    info = core.task_info.get(idx)
    if info is None or info[0] != worker or info[1]:
        return f"task {idx} is not outstanding at worker {worker}"
    if kind is not _DATA and (kind is _RESUME or not (kind is _ERROR or core.iterable)):
        return f"a {kind.value!r} message is not a result here"
    return None


def process_guard(core: ProtocolCore) -> str | None:
    # The spec's Buffered(i) /\ MayHandOut(i): with in_order=False any result, as it arrives.
    if core.ready is not None or core.rcvd_idx in core.results:
        return None
    return "no result to hand out is buffered"


def skip_guard(core: ProtocolCore) -> str | None:
    # The spec's Skippable(rcvd_idx): handed out already, or a retired worker's slot.
    if core.rcvd_idx < core.send_idx:
        info = core.task_info.get(core.rcvd_idx)
        if info is None or (not info[1] and not core.workers_status[info[0]]):
            return None
    return "rcvd_idx's slot is live"


def mark_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if core.exhausted_worker == worker else f"worker {worker} did not run dry"


def stop_guard(core: ProtocolCore) -> str | None:
    return None if core.phase is _ENDED or core.nothing_left() else "tasks are pending"


def detect_guard(core: ProtocolCore) -> str | None:
    # (``ended`` first: no worker ended is the answer on almost every step.)
    return None if core.ended and core.dead_dependencies() else "no dependent worker ended"


def detect_pin_guard(core: ProtocolCore) -> str | None:
    return None if core.pin_dead is not None else "the pin thread is not known to be dead"


def timeout_guard(core: ProtocolCore) -> str | None:
    # A death the loader can see wins over the timeout (torch checks its workers first).
    if not core.waits_for_data():
        return "the iterator waits for no result"
    return "a worker it depends on is dead" if core.dead_dependencies() else None


def recv_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if core.in_call else "nothing is read between calls"


def resume_guard(core: ProtocolCore) -> str | None:
    if not core.persistent_workers:
        return "workers are not persistent"
    return "the iterator is shut down" if core.shutdown else None


def drain_guard(core: ProtocolCore, worker: int, kind: Kind) -> str | None:
    # Anything but an ack is a stale result, dropped; an ack comes once from each worker.
    if kind is _RESUME and worker not in core.resume_pending:
        return f"worker {worker} already resumed"
    return None


def drop_guard(core: ProtocolCore) -> str | None:
    return "the iterator is shut down" if core.shutdown else None


def sentinel_guard(core: ProtocolCore, worker: int) -> str | None:
    return None if worker in core.needs_sentinel() else f"worker {worker} has its sentinel"


def terminate_guard(core: ProtocolCore, worker: int) -> str | None:
    if core.needs_sentinel():
        return "sentinels still to send"
    gone = core.joined[worker] or core.terminated[worker]
    return f"worker {worker} already exited" if gone else None


def join_guard(core: ProtocolCore, worker: int) -> str | None:
    if core.needs_sentinel():
        return "sentinels still to send"
    return f"worker {worker} already joined" if core.joined[worker] else None


GUARDS: dict[Action, Guard] = {
    _A.MAIN_CALL_NEXT: call_guard,
    _A.MAIN_TRY_PUT_INDEX: put_guard,
    _A.MAIN_GET_DATA: get_guard,
    _A.MAIN_PROCESS_DATA: process_guard,
    _A.MAIN_SKIP_EXHAUSTED: skip_guard,
    _A.MAIN_MARK_WORKER_UNAVAILABLE: mark_guard,
    _A.MAIN_STOP_ITERATION: stop_guard,
    _A.MAIN_DETECT_WORKER_FAILURE: detect_guard,
    _A.MAIN_DETECT_PIN_FAILURE: detect_pin_guard,
    _A.MAIN_TIMEOUT: timeout_guard,
    _A.FAULT_RECV_ERROR: recv_guard,
    _A.MAIN_RESUME_ITERATION: resume_guard,
    _A.MAIN_DRAIN_RESUME: drain_guard,
    _A.MAIN_DROP_ITERATOR: drop_guard,
    _A.MAIN_PUT_SENTINEL: sentinel_guard,
    _A.MAIN_TERMINATE_WORKER: terminate_guard,
    _A.MAIN_JOIN_WORKER: join_guard,
}
