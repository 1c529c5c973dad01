"""What each rank of a rank group did, step by step: the events `faultinject.ranks` streams.

Owns one frozen class per kind of rank event (as `faultinject.events` for one process, after
h11's ``_events.py``): `RankRun.of(rank, epoch, StepFailed) -> list[StepFailed]` with typed
fields, so a misspelt kind is an import error, not an empty list. Every event has its `rank`
(None: the group's own, not a rank's), `epoch` (None: not an epoch's), `t` and `dt` (see
`faultinject.events.Event`); `name` is the kind as messages print it. Plain data: pickled from
a rank through the sandbox child to the harness; knows nothing of loaders or of grading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from loaderspec.faultinject.events import Event

__all__ = [
    "GroupDone",
    "GroupPort",
    "RankBatch",
    "RankBuilt",
    "RankError",
    "RankEvent",
    "RankRaised",
    "RankRefused",
    "RankResumed",
    "RankStop",
    "StepFailed",
    "WaitFailed",
    "WorkersLeft",
]


@dataclass(frozen=True)
class RankEvent(Event):
    """One step of one rank (or of the group), as the harness hears of it."""

    name: ClassVar[str] = "rank event"
    rank: int | None = None


# ---------------------------------------------------------------- a rank's loader -------------
@dataclass(frozen=True)
class RankRefused(RankEvent):
    """The constructor refused the plan's configuration (`reason`): nothing ran."""

    name: ClassVar[str] = "refused"
    reason: str = ""


@dataclass(frozen=True)
class RankBuilt(RankEvent):
    """The constructor returned an object of `ref` (``"module:Class"``)."""

    name: ClassVar[str] = "built"
    ref: str = ""


@dataclass(frozen=True)
class RankBatch(RankEvent):
    """`next()` returned a batch: `value`, the batch `flat`."""

    name: ClassVar[str] = "batch"
    value: Any = None


@dataclass(frozen=True)
class RankStop(RankEvent):
    """`next()` raised StopIteration after `after` batches of the epoch."""

    name: ClassVar[str] = "stop"
    after: int = 0


@dataclass(frozen=True)
class RankError(RankEvent):
    """A call raised (`text`: ``"Type: message"``): `next()` after `step` batches, or the
    resume (`step` None: `state_dict()`, a new loader, `load_state_dict()`)."""

    name: ClassVar[str] = "error"
    text: str = ""
    step: int | None = None


@dataclass(frozen=True)
class RankResumed(RankEvent):
    """The rank went on with a new loader that loaded the old one's state (`bytes`: its
    pickle's size)."""

    name: ClassVar[str] = "resumed"
    bytes: int = 0


@dataclass(frozen=True)
class WorkersLeft(RankEvent):
    """The rank dropped its loader; `pids`: its workers still alive `RankPlan.drop_wait_s`
    (`MUST_BOUND_S` unless the harness knows the loader leaves them) later;
    `helpers`: its multiprocessing helpers (a resource tracker), which the group reaps."""

    name: ClassVar[str] = "left"
    pids: tuple[int, ...] = ()
    helpers: tuple[int, ...] = ()


# ---------------------------------------------------------------- the group -------------------
@dataclass(frozen=True)
class StepFailed(RankEvent):
    """The all_reduce after the rank's batch `step` failed (`text`): the group's collective
    timeout, another rank never joined this step."""

    name: ClassVar[str] = "step_failed"
    text: str = ""
    step: int = 0


@dataclass(frozen=True)
class WaitFailed(RankEvent):
    """Waiting in the group's store for the other ranks to be done failed (`text`)."""

    name: ClassVar[str] = "wait_failed"
    text: str = ""


@dataclass(frozen=True)
class GroupDone(RankEvent):
    """The rank saw every rank done (or gave up waiting); `dt`: how long it waited."""

    name: ClassVar[str] = "group_done"


@dataclass(frozen=True)
class RankRaised(RankEvent):
    """The rank raised outside the loader's calls (`text`) and exited."""

    name: ClassVar[str] = "raised"
    text: str = ""


@dataclass(frozen=True)
class GroupPort(RankEvent):
    """The loopback port the group met on (noted by the sandbox child, `rank` None)."""

    name: ClassVar[str] = "port"
    port: int = 0
