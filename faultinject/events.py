"""What the user saw, step by step: the events the driver streams from the sandbox child.

Owns one frozen class per kind of event (after h11's ``_events.py``): a case reads
``run.of(0, Error)`` and gets ``list[Error]`` with typed fields, so a misspelt kind is an import
error, not an empty list. Every event has its ``epoch`` (None: the loader's own, not an epoch's),
``t`` (``time.monotonic()`` when it was noted) and ``dt`` (how long the step took). Plain data:
pickled from the child to the harness; knows nothing of loaders or of grading.
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
    "KillParent",
    "Killed",
    "Len",
    "LoaderDropped",
    "Paused",
    "Refused",
    "Stop",
]


@dataclass(frozen=True)
class Event:
    """One step the driver took, as the harness hears of it."""

    name: ClassVar[str] = "event"  # for messages only ("2 batches then stop")
    epoch: int | None
    t: float
    dt: float


# ---------------------------------------------------------------- the results of next() -------
@dataclass(frozen=True)
class Batch(Event):
    """``next()`` returned a batch: ``value`` as the plan renders it (``flat``, ``describe`` or
    ``[index, epoch]`` pairs); ``pinned``: whether it is in pinned memory (None: not a tensor)."""

    name: ClassVar[str] = "batch"
    value: Any = None
    pinned: bool | None = None


@dataclass(frozen=True)
class Error(Event):
    """A call raised: ``type`` is the exception's class name, ``text`` ``"Type: message"``;
    ``fatal``: the loader's own failure (a RuntimeError naming the DataLoader: a worker death, a
    timeout); ``at``: the call, when not ``next()`` (``"iter"``, ``"len"``)."""

    name: ClassVar[str] = "error"
    text: str = ""
    type: str = ""
    fatal: bool = False
    at: str | None = None


@dataclass(frozen=True)
class Stop(Event):
    """``next()`` raised StopIteration."""

    name: ClassVar[str] = "stop"


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
    leak wait the harness chose for that type (None: the run's)."""

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
