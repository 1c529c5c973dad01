"""The main process's side of the protocol as tables: its states, which actions each state
enables and where each leads, and the rows ``next_action()`` answers from.

Rules of this file (after h11's ``_state.py``, which holds HTTP/1.1's transitions as tables):

* Every state of the main process's iterator (``Phase``), of its shutdown (``Stage``) and every
  request the user makes of it (``Request``) is here, with the tables that say what each enables
  and leads to. The docs draw the state diagrams from the ``*TRANSITIONS`` tables
  (``loaderspec.docsite.statediagram``), so the diagrams cannot go stale.
* This file knows the tables only: not the core's fields, nor when an action's guard holds
  (``reference.guards``), nor how ``next_action()`` proposes it (``reference.proposals``), nor
  the class that takes the steps (``reference.core``). It imports nothing but the vocabulary.
"""

from __future__ import annotations

import enum

from loaderspec.vocabulary import Action


class _State(enum.Enum):
    """An enum of the core's own states. Members are singletons compared by identity, so they
    hash by identity too: ``Enum.__hash__`` is a Python function, and these key the tables
    ``next_action()`` reads on every step of every batch."""

    __hash__ = object.__hash__


class Phase(_State):
    """Where the iterator stands. Only RUNNING hands out batches."""

    RUNNING = "running"
    RESUMING = "resuming"  # persistent workers: waiting for every worker's resume ack
    ENDED = "ended"  # StopIteration was raised
    FAILED = "failed"  # a fatal error (death, timeout, failed read, pin thread): fail-stop
    DROPPED = "dropped"  # the user let go of the iterator (del, break, error in the loop)


class Request(_State):
    """What the user asked of the iterator: the row ``next_action()`` answers from."""

    PREFETCH = "prefetch"  # iter() made this iterator: fill the prefetch window
    RESUME = "resume"  # iter() again on persistent workers: a new epoch, then PREFETCH
    NEXT = "next"  # next(): MainCallNext, then hand out one result (then REFILL) or raise
    REFILL = "refill"  # the rest of next() after a hand-out: torch's _try_put_index
    SHUTDOWN = "shutdown"  # the user let go (del, break, exit), or shutdown was decided


class Stage(_State):
    """How far the shutdown has come, in the seeds' order."""

    OPEN = "open"  # no shutdown decided
    PIN_RUNNING = "pin running"  # decided; the pin thread still reads
    PIN_TOLD = "pin told"  # its done event is set; not joined yet
    PIN_GONE = "pin gone"  # joined, or there is none: the workers may be told
    WORKERS_TOLD = "workers told"  # workers_done_event is set: sentinels, joins, terminations


class Decided(_State):
    """How a decided shutdown begins. Not a spec step of its own: the core decides it within the
    step that ends the iteration (StopIteration, a fatal error, the user letting go)."""

    WITH_PIN = "shutdown decided (a pin thread)"
    NO_PIN = "shutdown decided (no pin thread)"


_A, _P, _R, _S = Action, Phase, Request, Stage

# Which iteration actions each phase enables, and the phase each leads to. Read it as the state
# diagram:
#
#   RUNNING --StopIteration--> ENDED --ResumeIteration--> RESUMING --last DrainResume--> RUNNING
#   RUNNING --DropIterator--> DROPPED --ResumeIteration--> RESUMING      (persistent workers)
#   RUNNING/RESUMING --DetectWorkerFailure/DetectPinFailure/Timeout/FaultRecvError--> FAILED
#   (fail-stop: no exit; a next() on a FAILED iterator is CallNext, which changes nothing)
PHASE_TRANSITIONS: dict[Phase, dict[Action, Phase]] = {
    _P.RUNNING: {
        _A.MAIN_CALL_NEXT: _P.RUNNING,
        _A.MAIN_TRY_PUT_INDEX: _P.RUNNING,
        _A.MAIN_GET_DATA: _P.RUNNING,
        _A.MAIN_PROCESS_DATA: _P.RUNNING,
        _A.MAIN_SKIP_EXHAUSTED: _P.RUNNING,
        _A.MAIN_MARK_WORKER_UNAVAILABLE: _P.RUNNING,
        _A.MAIN_STOP_ITERATION: _P.ENDED,
        _A.MAIN_DETECT_WORKER_FAILURE: _P.FAILED,
        _A.MAIN_DETECT_PIN_FAILURE: _P.FAILED,
        _A.MAIN_TIMEOUT: _P.FAILED,
        _A.FAULT_RECV_ERROR: _P.FAILED,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.RESUMING: {
        _A.MAIN_DRAIN_RESUME: _P.RESUMING,  # RUNNING once the last ack is in
        _A.MAIN_DETECT_WORKER_FAILURE: _P.FAILED,
        _A.MAIN_DETECT_PIN_FAILURE: _P.FAILED,
        _A.MAIN_TIMEOUT: _P.FAILED,
        _A.FAULT_RECV_ERROR: _P.FAILED,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.ENDED: {
        _A.MAIN_CALL_NEXT: _P.ENDED,
        _A.MAIN_STOP_ITERATION: _P.ENDED,  # next() after the end raises StopIteration again
        _A.MAIN_RESUME_ITERATION: _P.RESUMING,
        _A.MAIN_DROP_ITERATOR: _P.ENDED,
    },
    _P.DROPPED: {
        _A.MAIN_RESUME_ITERATION: _P.RESUMING,
        _A.MAIN_DROP_ITERATOR: _P.DROPPED,
    },
    _P.FAILED: {_A.MAIN_CALL_NEXT: _P.FAILED},
}

# Once shutdown is decided, the only iteration actions left are a next() on an ended iterator
# (StopIteration again) and a next() on a failed one (it raises again).
AFTER_SHUTDOWN = {
    (_P.ENDED, _A.MAIN_CALL_NEXT),
    (_P.ENDED, _A.MAIN_STOP_ITERATION),
    (_P.FAILED, _A.MAIN_CALL_NEXT),
}

# The shutdown actions each stage enables, and the stage each leads to (the seeds' order):
#
#   OPEN --(shutdown decided)--> PIN_RUNNING --SetPinDone--> PIN_TOLD --JoinPinThread--> PIN_GONE
#   OPEN --(decided, no pin thread)--> PIN_GONE --SetWorkersDone--> WORKERS_TOLD
#   WORKERS_TOLD: PutSentinel per worker owed one, then JoinWorker (or TerminateWorker and
#   JoinWorker) per worker.
SHUTDOWN_TRANSITIONS: dict[Stage, dict[Action | Decided, Stage]] = {
    _S.OPEN: {Decided.WITH_PIN: _S.PIN_RUNNING, Decided.NO_PIN: _S.PIN_GONE},
    _S.PIN_RUNNING: {_A.MAIN_SET_PIN_DONE: _S.PIN_TOLD},
    _S.PIN_TOLD: {_A.MAIN_JOIN_PIN_THREAD: _S.PIN_GONE},
    _S.PIN_GONE: {_A.MAIN_SET_WORKERS_DONE: _S.WORKERS_TOLD},
    _S.WORKERS_TOLD: {
        _A.MAIN_PUT_SENTINEL: _S.WORKERS_TOLD,
        _A.MAIN_TERMINATE_WORKER: _S.WORKERS_TOLD,
        _A.MAIN_JOIN_WORKER: _S.WORKERS_TOLD,
    },
}

# What the main process does next, by request and phase: the first action of the row whose guard
# holds. A missing row means the request cannot be served in that phase (a violation); a row
# with nothing enabled means the request is served. Fail-stop is the FAILED row of NEXT: the call
# and nothing else (the loop raises the failure again). A worker's death comes first in a row,
# so it wins over a timeout found at the same wait (the spec's MainTimeout guard).
NEXT_ACTIONS: dict[Request, dict[Phase, tuple[Action, ...]]] = {
    _R.PREFETCH: {_P.RUNNING: (_A.MAIN_TRY_PUT_INDEX,)},
    _R.RESUME: {
        _P.RUNNING: (_A.MAIN_DROP_ITERATOR,),  # the last epoch was broken off
        _P.ENDED: (_A.MAIN_RESUME_ITERATION,),
        _P.DROPPED: (_A.MAIN_RESUME_ITERATION,),
        _P.RESUMING: (
            _A.MAIN_DETECT_WORKER_FAILURE,
            _A.MAIN_DETECT_PIN_FAILURE,
            _A.MAIN_TIMEOUT,
            _A.MAIN_DRAIN_RESUME,
        ),
    },
    _R.NEXT: {
        _P.RUNNING: (
            _A.MAIN_CALL_NEXT,
            _A.MAIN_DETECT_WORKER_FAILURE,
            _A.MAIN_TRY_PUT_INDEX,  # a due put first: retire, then sentinel, then put
            _A.MAIN_MARK_WORKER_UNAVAILABLE,
            _A.MAIN_PROCESS_DATA,
            _A.MAIN_SKIP_EXHAUSTED,
            # Known only from a wait, so only where the next step would be the wait: nothing
            # before them is enabled then, and a wait's event enables none of it.
            _A.MAIN_DETECT_PIN_FAILURE,
            _A.MAIN_TIMEOUT,
            _A.MAIN_GET_DATA,
            _A.MAIN_STOP_ITERATION,
        ),
        _P.ENDED: (_A.MAIN_CALL_NEXT, _A.MAIN_STOP_ITERATION),
        _P.FAILED: (_A.MAIN_CALL_NEXT,),
    },
    _R.REFILL: {_P.RUNNING: (_A.MAIN_TRY_PUT_INDEX,)},
    _R.SHUTDOWN: {phase: (_A.MAIN_DROP_ITERATOR,) for phase in Phase},
}
# The action a request stands for, to name it in a violation.
REQUEST_ACTION: dict[Request, Action] = {
    _R.PREFETCH: _A.MAIN_TRY_PUT_INDEX,
    _R.RESUME: _A.MAIN_RESUME_ITERATION,
    _R.NEXT: _A.MAIN_GET_DATA,
    _R.REFILL: _A.MAIN_TRY_PUT_INDEX,
    _R.SHUTDOWN: _A.MAIN_DROP_ITERATOR,
}
# Once shutdown is decided, a SHUTDOWN request is answered from the stage.
SHUTDOWN_ACTIONS: dict[Stage, tuple[Action, ...]] = {
    _S.OPEN: (),
    _S.PIN_RUNNING: (_A.MAIN_SET_PIN_DONE,),
    _S.PIN_TOLD: (_A.MAIN_JOIN_PIN_THREAD,),
    _S.PIN_GONE: (_A.MAIN_SET_WORKERS_DONE,),
    _S.WORKERS_TOLD: (_A.MAIN_PUT_SENTINEL, _A.MAIN_JOIN_WORKER),
}


# The spec's names for the phase (its iter_state) and for a failure (its failure variable).
ITER_STATE: dict[Phase, str] = {
    _P.RUNNING: "running",
    _P.RESUMING: "resuming",
    _P.ENDED: "stopped",
    _P.FAILED: "failed",
    _P.DROPPED: "dropped",
}
FAILURE_NAME: dict[Action, str] = {
    _A.MAIN_DETECT_WORKER_FAILURE: "death",
    _A.MAIN_TIMEOUT: "timeout",
    _A.FAULT_RECV_ERROR: "recv",
    _A.MAIN_DETECT_PIN_FAILURE: "pin",
}


# The actions next_action() never answers: they are taken on what the world reports (a worker
# killed at the end of the bounded join; a read that failed, the spec's FaultRecvError, which the
# main process observes itself and takes as its own step).
REPORTED_ACTIONS = frozenset({_A.MAIN_TERMINATE_WORKER, _A.FAULT_RECV_ERROR})
# The core's method of each action it takes that is not a main-process action of the vocabulary
# (``CORE_METHOD``): the fault the main process observes itself.
OBSERVED_FAULT_METHOD: dict[Action, str] = {_A.FAULT_RECV_ERROR: "recv_error"}
