"""What a checkpoint-and-resume scenario saw, step by step: the events `faultinject.resume`
streams.

Owns one frozen class per kind of resume event (as `faultinject.events` for a plain run, after
h11's ``_events.py``): `ResumeRun.of(seg, StateTaken) -> list[StateTaken]` with typed fields, so
a misspelt kind is an import error, not an empty list. Every event has its segment `seg` (-1:
the uninterrupted run; 0, 1, ...: the interrupted run's loaders), `epoch` (None: not an
epoch's) and `t` (see `faultinject.events.Event`; `dt` is 0: nothing here is timed). Plain data:
pickled from the sandbox child to the harness; knows nothing of loaders or of grading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from loaderspec.faultinject.events import Event

__all__ = [
    "Moved",
    "NoState",
    "ResumeBatch",
    "ResumeError",
    "ResumeEvent",
    "ResumeRefused",
    "ResumeStop",
    "StateChanged",
    "StateTaken",
]


@dataclass(frozen=True)
class ResumeEvent(Event):
    """One step of one segment, as the harness hears of it."""

    name: ClassVar[str] = "resume event"
    seg: int = -1


@dataclass(frozen=True)
class ResumeRefused(ResumeEvent):
    """The constructor refused the plan's configuration (`reason`): nothing ran."""

    name: ClassVar[str] = "refused"
    reason: str = ""


@dataclass(frozen=True)
class ResumeBatch(ResumeEvent):
    """`next()` returned a batch (`value`: the batch `flat`); `kept`: False when it came after
    the state the next segment resumes from was taken (the resumed loader must hand it again)."""

    name: ClassVar[str] = "batch"
    value: Any = None
    kept: bool = True


@dataclass(frozen=True)
class ResumeStop(ResumeEvent):
    """`next()` raised StopIteration."""

    name: ClassVar[str] = "stop"


@dataclass(frozen=True)
class ResumeError(ResumeEvent):
    """A call raised: `at` is the call (``"iter"``, ``"next"``, ``"state_dict"``, ``"load"``),
    `type` the exception's class name, `text` ``"Type: message"``; `kept` as `ResumeBatch`'s for
    an error `next()` handed out in its turn."""

    name: ClassVar[str] = "error"
    at: str = ""
    type: str = ""
    text: str = ""
    kept: bool = True


@dataclass(frozen=True)
class StateTaken(ResumeEvent):
    """`state_dict()` returned a state after `after` batches of the epoch: `which` (``"cut"``,
    or ``"earlier"``: the first of two in one epoch), `bytes` its pickle's size, `weights_only`
    None or why ``torch.save`` then ``torch.load(weights_only=True)`` failed."""

    name: ClassVar[str] = "state"
    which: str = "cut"
    after: int = 0
    bytes: int = 0
    weights_only: str | None = None


@dataclass(frozen=True)
class StateChanged(ResumeEvent):
    """The state `which`, taken after `after` batches, pickles differently at the end of its
    segment than when `state_dict()` returned it."""

    name: ClassVar[str] = "state_changed"
    which: str = "cut"
    after: int = 0


@dataclass(frozen=True)
class Moved(ResumeEvent):
    """What the user did with a resumed loader before `load_state_dict`: `how` is ``"iter"``
    (an `iter()` and one `next()`) or ``"state_dict"``."""

    name: ClassVar[str] = "moved"
    how: str = ""


@dataclass(frozen=True)
class NoState(ResumeEvent):
    """The segment ended before it could take its state: one of the plan's faults raised in
    the user's `for` loop before its `break` (the loop, and the user's run, end there). A run
    with no state to resume from: nothing after it is played."""

    name: ClassVar[str] = "no_state"
    after: int = 0
