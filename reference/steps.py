"""What both protocol cores say: the step an action took, the kind of message it read, and the
violation it raises when the spec does not enable it.

Owns ``Kind``, ``Step`` and ``ProtocolViolation``, shared by the main process's core
(``reference.core``), the worker's (``reference.worker_core``), the messages
(``reference.messages``) and the trace records written from ``Step``. Pure data: imports
nothing but the vocabulary, so a worker reads these without importing the main process's
tables or class.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from loaderspec.vocabulary import Action


class Kind(str, enum.Enum):
    """What a message from a worker carries (the trace's ``kind``)."""

    DATA = "data"  # a fetched batch
    ERROR = "error"  # an ExceptionWrapper: raised in its turn, iteration goes on
    EXHAUSTED = "exhausted"  # the worker's IterableDataset shard ran dry
    RESUME = "resume"  # acknowledgement of a new epoch (persistent workers)


class Step(NamedTuple):
    """One action with its parameters: what a core's ``next_action()`` answers, and what a
    trace record says (``last``). ``worker``/``task``/``kind`` as in the trace record."""

    action: Action
    worker: int | None = None
    task: int | None = None
    kind: Kind | None = None


class ProtocolViolation(Exception):
    """An action was asked of a core while the spec does not enable it.

    The core's state is unchanged. ``action`` is the spec action, ``state`` a snapshot.
    """

    def __init__(self, action: Action, state: dict[str, Any], why: str) -> None:
        self.action = action
        self.state = state
        self.why = why
        super().__init__(f"can't take {action.value} when {why}; state={state}")
