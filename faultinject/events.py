"""What the user saw, step by step: the events every scenario streams from the sandbox child.

Owns one frozen class per kind of event (after h11's ``_events.py``), for every kind of scenario
(one loader, a rank group, a checkpoint and resume): a case reads ``run.of(0, Error)`` and gets
``list[Error]`` with typed fields, so a misspelt kind is an import error, not an empty list.
Every event has its ``epoch`` (None: the loader's own, not an epoch's), ``t``
(``time.monotonic()`` when it was noted) and ``dt`` (how long the step took), and, in a rank
group, its ``rank`` (None: the group's own), in a resume scenario its segment ``seg`` (-1: the
uninterrupted run; 0, 1, ...: the interrupted run's loaders). Plain data: pickled from the child
to the harness; knows nothing of loaders or of grading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "AliveAfterDrop",
    "AliveAfterError",
    "Awaited",
    "Batch",
    "Built",
    "Call",
    "Dropped",
    "Error",
    "Event",
    "GroupDone",
    "GroupPort",
    "KillParent",
    "Killed",
    "Len",
    "LoaderDropped",
    "Moved",
    "NoState",
    "Paused",
    "Raised",
    "Refused",
    "Resumed",
    "StateChanged",
    "StateTaken",
    "StepFailed",
    "Stop",
    "WaitFailed",
    "WorkersLeft",
]


@dataclass(frozen=True)
class Event:
    """One step the driver took, as the harness hears of it."""

    name: ClassVar[str] = "event"  # for messages only ("2 batches then stop")
    epoch: int | None
    t: float
    dt: float
    rank: int | None = None  # a rank group's rank (None: not a rank's)
    seg: int | None = None  # a resume scenario's segment (None: not a resume's)


# ---------------------------------------------------------------- the results of next() -------
@dataclass(frozen=True)
class Batch(Event):
    """``next()`` returned a batch: ``value`` as the plan renders it (``flat``, ``describe`` or
    ``[index, epoch]`` pairs); ``pinned``: whether it is in pinned memory (None: not a tensor);
    ``kept``: False when, in a resume scenario, it came after the state the next segment resumes
    from was taken (the resumed loader must hand it again)."""

    name: ClassVar[str] = "batch"
    value: Any = None
    pinned: bool | None = None
    kept: bool = True


@dataclass(frozen=True)
class Error(Event):
    """A call raised: ``type`` is the exception's class name, ``text`` ``"Type: message"``;
    ``fatal``: the loader's own failure (a RuntimeError naming the DataLoader: a worker death, a
    timeout); ``at``: the call, when not ``next()`` (``"iter"``, ``"len"``, ``"state_dict"``,
    ``"load"``: a new loader's ``load_state_dict``, ``"resume"``: a rank's whole resume);
    ``step``: in a rank group, the batches of the epoch before it; ``kept``: as `Batch`'s."""

    name: ClassVar[str] = "error"
    text: str = ""
    type: str = ""
    fatal: bool = False
    at: str | None = None
    step: int | None = None
    kept: bool = True


@dataclass(frozen=True)
class Stop(Event):
    """``next()`` raised StopIteration (in a rank group: after ``after`` batches of the
    epoch)."""

    name: ClassVar[str] = "stop"
    after: int = 0


Call = Batch | Error | Stop  # what one next() gave

# ---------------------------------------------------------------- the loader's life -----------


@dataclass(frozen=True)
class Refused(Event):
    """The constructor refused the plan's configuration (``reason``): nothing ran."""

    name: ClassVar[str] = "refused"
    reason: str = ""


@dataclass(frozen=True)
class Built(Event):
    """The constructor returned an object of ``ref`` (``"module:Class"``); ``linger_s``: the
    leak wait the harness chose for that type (None: the run's, or a rank's loader)."""

    name: ClassVar[str] = "built"
    ref: str = ""
    linger_s: float | None = None


@dataclass(frozen=True)
class Len(Event):
    """``len(loader)`` answered ``length``."""

    name: ClassVar[str] = "len"
    length: int = 0


@dataclass(frozen=True)
class Dropped(Event):
    """The epoch's iterator was let go (``del``, leaving a loop); ``dt``: how long that took."""

    name: ClassVar[str] = "dropped"


@dataclass(frozen=True)
class LoaderDropped(Event):
    """The loader was let go and collected (``dt``: how long that took); ``fds``: the descriptors
    the process had open once the threads the loader started had ended (1 s at most)."""

    name: ClassVar[str] = "loader_dropped"
    fds: int = 0


@dataclass(frozen=True)
class AliveAfterDrop(Event):
    """The workers (``pids``) still alive ``MUST_BOUND_S`` after the iterator was dropped."""

    name: ClassVar[str] = "alive_after_drop"
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class AliveAfterError(Event):
    """The workers (``pids``) still alive ``Plan.hold_after_error_s`` after the epoch's error,
    the iterator held (not dropped) all the while; ``dt``: how long the driver waited."""

    name: ClassVar[str] = "alive_after_error"
    pids: tuple[int, ...] = ()


# ---------------------------------------------------------------- the plan's own moves --------
@dataclass(frozen=True)
class Awaited(Event):
    """A plan's ``Await`` ended: ``ok`` when its records came before its timeout."""

    name: ClassVar[str] = "awaited"
    ok: bool = False


@dataclass(frozen=True)
class Killed(Event):
    """One worker was SIGKILLed from outside (``pids``: empty when none could be seen)."""

    name: ClassVar[str] = "killed"
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class KillParent(Event):
    """The loader's process is about to be SIGKILLed (``Leave("kill_parent")``)."""

    name: ClassVar[str] = "kill_parent"


@dataclass(frozen=True)
class Paused(Event):
    """After ``consumed`` batches the user paused (``Plan.pause_s``); ``fetched`` distinct
    items had been fetched by its end."""

    name: ClassVar[str] = "paused"
    fetched: int = 0
    consumed: int = 0


@dataclass(frozen=True)
class WorkersLeft(Event):
    """A rank dropped its loader; ``pids``: its workers still alive ``Plan.drop_wait_s``
    (``MUST_BOUND_S`` unless the harness knows the loader leaves them) later; ``helpers``: its
    multiprocessing helpers (a resource tracker), which the group reaps."""

    name: ClassVar[str] = "left"
    pids: tuple[int, ...] = ()
    helpers: tuple[int, ...] = ()


# ---------------------------------------------------------------- a rank group ----------------
@dataclass(frozen=True)
class Resumed(Event):
    """The rank went on with a new loader that loaded the old one's state (``bytes``: its
    pickle's size)."""

    name: ClassVar[str] = "resumed"
    bytes: int = 0


@dataclass(frozen=True)
class StepFailed(Event):
    """The all_reduce after the rank's batch ``step`` failed (``text``): the group's collective
    timeout, another rank never joined this step."""

    name: ClassVar[str] = "step_failed"
    text: str = ""
    step: int = 0


@dataclass(frozen=True)
class WaitFailed(Event):
    """Waiting in the group's store for the other ranks to be done failed (``text``)."""

    name: ClassVar[str] = "wait_failed"
    text: str = ""


@dataclass(frozen=True)
class GroupDone(Event):
    """The rank saw every rank done (or gave up waiting); ``dt``: how long it waited."""

    name: ClassVar[str] = "group_done"


@dataclass(frozen=True)
class Raised(Event):
    """The rank raised outside the loader's calls (``text``) and exited."""

    name: ClassVar[str] = "raised"
    text: str = ""


@dataclass(frozen=True)
class GroupPort(Event):
    """The loopback port the group met on (noted by the sandbox child, ``rank`` None)."""

    name: ClassVar[str] = "port"
    port: int = 0


# ---------------------------------------------------------------- checkpoint and resume -------
@dataclass(frozen=True)
class StateTaken(Event):
    """``state_dict()`` returned a state after ``after`` batches of the epoch: ``which``
    (``"cut"``, or ``"earlier"``: the first of two in one epoch), ``bytes`` its pickle's size,
    ``weights_only`` None or why ``torch.save`` then ``torch.load(weights_only=True)`` failed."""

    name: ClassVar[str] = "state"
    which: str = "cut"
    after: int = 0
    bytes: int = 0
    weights_only: str | None = None


@dataclass(frozen=True)
class StateChanged(Event):
    """The state ``which``, taken after ``after`` batches, pickles differently at the end of its
    segment than when ``state_dict()`` returned it."""

    name: ClassVar[str] = "state_changed"
    which: str = "cut"
    after: int = 0


@dataclass(frozen=True)
class Moved(Event):
    """What the user did with a resumed loader before ``load_state_dict``: ``how`` is
    ``"iter"`` (an ``iter()`` and one ``next()``) or ``"state_dict"``."""

    name: ClassVar[str] = "moved"
    how: str = ""


@dataclass(frozen=True)
class NoState(Event):
    """The segment ended before it could take its state: one of the plan's faults raised in
    the user's ``for`` loop before its ``break`` (the loop, and the user's run, end there). A run
    with no state to resume from: nothing after it is played."""

    name: ClassVar[str] = "no_state"
    after: int = 0
