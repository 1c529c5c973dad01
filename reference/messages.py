"""What travels between the loader's process and its workers, and what the main process waits for.

Owns the types of the reference loader's messages and events, and the one frozen configuration a
worker starts with. Pure data: imports neither torch nor any IO, so the core, the loop, the shell,
the worker and the test model all share these types.

On the wire a ``Task`` is the plain tuple ``(idx, index)`` and a ``Result`` the plain tuple
``(idx, kind value, payload)``: pickling a NamedTuple or an enum member looks its class up by
name on both sides (about 11 us more per message, measured), more than the rest of a small message
costs; ``to_wire``/``from_wire`` convert at the two ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from loaderspec.reference.steps import Kind

# Index-queue messages that are not tasks.
RESUME = "resume"  # a new epoch begins (torch's _ResumeIteration); the worker acks with a Result
SENTINEL = None  # exit (torch's None); the worker logs WorkerExit and returns
NO_TASK = -1  # the idx of a result that answers no task: the resume ack

# The longest a traced process waits for the trace-order lock (``WorkerChannels.trace_order``):
# a worker killed while holding it must not stall the shutdown; the trace is then unordered.
TRACE_ORDER_WAIT_S = 0.2


class Task(NamedTuple):
    """Main -> worker: fetch ``index`` (what the sampler gave) as task ``idx`` (``send_idx``)."""

    idx: int
    index: Any

    def to_wire(self) -> tuple[int, Any]:
        return (self.idx, self.index)


Origin = tuple[int, int, int]  # (worker, task idx, worker's epoch): who produced a message


class Result(NamedTuple):
    """Worker -> main: the outcome of task ``idx``, or a resume ack (``resume_ack``).

    ``origin``: when tracing, the payload-origin ghost (worker, idx, epoch) the worker writes
    with the message; it travels with the payload to the hand-out (``Traced``), where the
    shell logs it, so a batch handed out that is not the one the core chose shows in the trace.
    """

    idx: int
    kind: Kind
    payload: Any  # the batch, an ExceptionWrapper, or None
    origin: Origin | None = None

    @classmethod
    def resume_ack(cls, origin: Origin | None = None) -> Result:
        """A worker's answer to RESUME: the new epoch has begun there (it names no task)."""
        return cls(NO_TASK, Kind.RESUME, None, origin)

    def to_wire(self) -> tuple[Any, ...]:
        if self.origin is None:
            return (self.idx, _WIRE_KINDS[self.kind], self.payload)
        return (self.idx, _WIRE_KINDS[self.kind], self.payload, self.origin)

    @classmethod
    def from_wire(cls, raw: tuple[Any, ...]) -> Result:
        if len(raw) == 3:  # every result when not tracing: built as a tuple, without the
            idx, kind, payload = raw  # NamedTuple's Python-level __new__ (as core.py's steps)
            return _new(cls, (idx, _KINDS[kind], payload, None))
        idx, kind, payload, origin = raw
        return cls(idx, _KINDS[kind], payload, tuple(origin))


class Traced(NamedTuple):
    """A payload with its origin, as the core holds it while tracing (the core never looks
    inside a payload); the shell unwraps it where it hands the batch out."""

    payload: Any
    origin: Origin


_new = tuple.__new__  # a NamedTuple from a tuple of all its fields, without its __new__
_KINDS = {kind.value: kind for kind in Kind}  # Kind(value) is a Python-level Enum call
_WIRE_KINDS = {kind: kind.value for kind in Kind}  # kind.value: ~140 ns on 3.11, this ~20

IndexMessage = Task | str | None  # a Task, RESUME or SENTINEL


class Arrived(NamedTuple):
    """Event: a result message of ``worker`` was read."""

    worker: int
    result: Result


class Exited(NamedTuple):
    """Event: these workers' processes have ended (all that were found ended together)."""

    workers: tuple[int, ...]


class TimedOut(NamedTuple):
    """Event: the wait ran past the loader's ``timeout``. ``ended``: the workers the port found
    ended at that moment (a death the loader can see wins over the timeout)."""

    after_s: float
    ended: tuple[int, ...] = ()


class RecvFailed(NamedTuple):
    """Event: a whole message of ``worker`` arrived but could not be rebuilt here (the spec's
    FaultRecvError): it is lost. ``detail``: the error, as text."""

    worker: int
    detail: str


class PinDied(NamedTuple):
    """Event: the pin-memory thread is gone (after everything it passed on was read).
    ``worker``: whose result it could not read, if that killed it; ``detail``: why."""

    worker: int | None
    detail: str


# What a wait of the main process hands back (``loop.Port.wait``), one of the five above.
WaitEvent = Arrived | Exited | TimedOut | RecvFailed | PinDied


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker of one iterator starts with (torch's ``_worker_loop`` arguments that are
    the same for all workers). Picklable for spawn and forkserver when the dataset is."""

    dataset_kind: int  # torch's _DatasetKind.Map or .Iterable
    dataset: Any
    auto_collation: bool
    collate_fn: Any
    drop_last: bool
    base_seed: int
    worker_init_fn: Any
    num_workers: int
    parent_pid: int  # the loader's process: the worker exits when it dies
    use_pdeathsig: bool  # the kernel's parent-death signal reaches us (see reference/worker.py)
    # A resumed epoch (reference/checkpoint.py): per worker id, what to do before the first
    # fetch (None: nothing); the worker id slot 0 runs as; whether each result carries the
    # user's state (an IterableDataset's always: its iterator may be Stateful).
    starts: tuple[Any, ...] | None = None
    shard_offset: int = 0
    carry_state: bool = False


@dataclass(frozen=True)
class WorkerChannels:
    """One worker's ends of its pipes, and the events and locks it shares with the loader."""

    index: Any  # Connection: tasks, RESUME and SENTINEL in
    result: Any  # Connection: results out
    done_event: Any  # workers_done_event (a multiprocessing Event)
    trace_order: Any = None  # tracing only: a multiprocessing Lock (see shell.set_workers_done)
    arena: Any = None  # reference.arena.ArenaHandle: the worker's shared-memory slots, or None
