"""Fault descriptions: what goes wrong, and at which item.

This module owns the *vocabulary* of in-worker faults. The dataclasses are plain data (frozen,
picklable, comparable) so they travel inside a dataset into any loader's workers, under fork,
spawn or forkserver. Firing them is `faultinject._fire`'s job; this module must not know about
datasets, loaders or processes.

`at` is the dataset index for a map-style dataset and the item number within one worker's shard
for an iterable one (`EVERY`: every item). `once=True` makes a fault fire only the first time its
item is reached, across every process that shares the dataset's state dir (an `O_EXCL` marker
file), so a re-run of the same index (a retry, a new epoch, a fresh worker) does not fire it
again.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COLLATE_POINTS",
    "DIE_POINTS",
    "EVERY",
    "RAISE_POINTS",
    "Die",
    "Fault",
    "Hang",
    "InjectedError",
    "Raise",
    "RaiseUnrebuildable",
    "SkewWorker",
    "Sleep",
    "Unloadable",
    "UnloadableError",
    "UnloadableItem",
    "Unpicklable",
    "UnpicklableItem",
    "UnrebuildableError",
]

DiePoint = Literal[
    "before_fetch", "after_fetch", "in_collate", "after_collate", "blocked_put", "idle"
]
DIE_POINTS: tuple[str, ...] = (
    "before_fetch",
    "after_fetch",
    "in_collate",
    "after_collate",
    "blocked_put",
    "idle",
)
COLLATE_POINTS: tuple[str, ...] = ("in_collate", "after_collate")  # fired by faultinject.collate
RaisePoint = Literal["in_fetch", "in_collate", "in_worker_init"]
RAISE_POINTS: tuple[str, ...] = ("in_fetch", "in_collate", "in_worker_init")

# A fault's `at` that matches every item (no dataset index or shard position is negative).
EVERY = -1

# A result this large cannot fit in a pipe (64 KiB by default, at most /proc/sys/fs/pipe-max-size,
# 1 MiB by default), so the writer blocks until someone reads.
BLOCKED_PUT_BYTES = 8 << 20


class InjectedError(Exception):
    """The default exception type of `Raise`: nobody else raises it, so a test can't be fooled."""


class UnrebuildableError(Exception):
    """An exception that cannot be rebuilt from its message, nor unpickled (pytorch#30147).

    `__init__` takes two arguments while `args` holds one string, so both `type(e)(str(e))` (what
    torch's `ExceptionWrapper.reraise` does) and `pickle.loads(pickle.dumps(e))` raise `TypeError`.
    """

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail


class UnpicklableItem:
    """A dataset result that refuses to be pickled, like a PIL image whose `__getstate__` raises
    (pytorch#142884). Pickling raises `TypeError` naming the index."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(f"faultinject.UnpicklableItem({self.index}) cannot be pickled")

    def __repr__(self) -> str:
        return f"UnpicklableItem({self.index})"


class UnloadableError(Exception):
    """Raised where an `UnloadableItem` is unpickled: in the loader's process, not the worker."""


def _refuse_to_load(index: int) -> None:
    raise UnloadableError(f"faultinject.UnloadableItem({index}) cannot be unpickled here")


class UnloadableItem:
    """A dataset result that pickles in the worker but cannot be rebuilt where it is read (a
    class the loader's process cannot import, a shared-memory segment already gone: pytorch
    F4, G1): the loader's *receive* fails, not the worker's put."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self) -> tuple[Callable[[int], None], tuple[int]]:
        return (_refuse_to_load, (self.index,))

    def __repr__(self) -> str:
        return f"UnloadableItem({self.index})"


@dataclass(frozen=True)
class Die:
    """The worker kills itself with `signal` at item `at`, at `point`:

    * `"before_fetch"`: inside `__getitem__` / the iterator, before the item exists.
    * `"after_fetch"`: after the item was produced (recorded), before it is returned.
    * `"in_collate"`: inside `faultinject.collate(...)`, while collating the batch holding `at`.
    * `"after_collate"`: inside `faultinject.collate(...)`, once the base collate has made the
      batch holding `at` (so the worker dies holding it, in whatever memory the loader's collate
      put it: a shared-memory segment or slot, say), before it is returned.
    * `"blocked_put"`: the item returned is `blocked_put_bytes` of `bytes` (too big for a pipe),
      so the worker blocks putting it while nobody reads. With `signal=None` it stays blocked and
      the harness acts (kills it or its parent); otherwise a daemon thread in the worker waits
      (bounded by `blocked_wait_s`) until a thread of the worker sleeps in a pipe write, then sends
      `signal`.
    * `"idle"`: item `at` is returned normally; a daemon thread in the worker then waits
      (bounded by `blocked_wait_s`) until the thread that fetched it sleeps waiting for work
      (in a poll, select or pipe read: the worker's loop waiting for its next index), then
      sends `signal`. A worker that always has work queued never idles: the record then says
      `Die:idle:busy` and the signal is sent at the bound anyway.

    Die never fires in the main process (no worker info) unless `anywhere=True`: with
    `num_workers=0` it would kill the test runner.
    """

    at: int
    signal: int | None = _signal.SIGKILL
    point: DiePoint = "before_fetch"
    once: bool = False
    anywhere: bool = False
    blocked_put_bytes: int = BLOCKED_PUT_BYTES
    blocked_wait_s: float = 10.0  # bound on waiting for "blocked_put" / "idle"

    def __post_init__(self) -> None:
        if self.point not in DIE_POINTS:
            raise ValueError(f"Die.point must be one of {DIE_POINTS}, got {self.point!r}")
        if self.signal is None and self.point != "blocked_put":
            raise ValueError("Die(signal=None) only makes sense with point='blocked_put'")


@dataclass(frozen=True)
class Hang:
    """The worker blocks at item `at` for `seconds` (default: an hour, i.e. "forever" for any
    test) without looking at its parent, like a stuck read. Never in the main process unless
    `anywhere=True`."""

    at: int
    seconds: float = 3600.0
    once: bool = False
    anywhere: bool = False


@dataclass(frozen=True)
class Sleep:
    """Fetching item `at` takes `seconds` longer."""

    at: int
    seconds: float
    once: bool = False


@dataclass(frozen=True)
class Raise:
    """Item `at` raises `exc_type(message)`; `message` defaults to one naming the item.
    `exc_type` must be importable (module-level) to reach the main process.

    `point` says where: `"in_fetch"` (inside `__getitem__` / the iterator), `"in_collate"`
    (inside `faultinject.collate(...)`, collating the batch holding `at`) or `"in_worker_init"`
    (inside `faultinject.worker_init(...)`; `at` is then the worker id).
    """

    at: int
    exc_type: type[BaseException] = InjectedError
    message: str | None = None
    once: bool = False
    point: RaisePoint = "in_fetch"

    def __post_init__(self) -> None:
        if self.point not in RAISE_POINTS:
            raise ValueError(f"Raise.point must be one of {RAISE_POINTS}, got {self.point!r}")

    def text(self) -> str:
        """The message the exception carries."""
        return self.message if self.message is not None else f"injected fault at item {self.at}"


@dataclass(frozen=True)
class RaiseUnrebuildable:
    """Fetching item `at` raises `UnrebuildableError(what, detail)` (see that class)."""

    at: int
    once: bool = False

    def text(self) -> str:
        """The message the exception carries (`str(exc)`)."""
        return f"unrebuildable fault at item {self.at}: two-argument __init__"


@dataclass(frozen=True)
class Unpicklable:
    """Item `at` is an `UnpicklableItem`: the worker cannot send it. Use `faultinject.collate`
    (or no auto-collation) so that collate does not reject it first."""

    at: int
    once: bool = False


@dataclass(frozen=True)
class Unloadable:
    """Item `at` is an `UnloadableItem`: the worker sends it, the loader's process (or its pin
    thread) cannot read it back. Use `faultinject.collate` (or no auto-collation) so that
    collate does not reject it first."""

    at: int
    once: bool = False


@dataclass(frozen=True)
class SkewWorker:
    """Worker `worker_id` sleeps `seconds` before every item it fetches (a slow worker)."""

    worker_id: int
    seconds: float

    @property
    def at(self) -> None:
        """SkewWorker applies to every item of its worker, not to one index."""
        return None

    @property
    def once(self) -> bool:
        """Never once-only."""
        return False


Fault = Die | Hang | Sleep | Raise | RaiseUnrebuildable | Unpicklable | Unloadable | SkewWorker
