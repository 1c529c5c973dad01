"""Checkpoint and resume any loader that has `state_dict()` / `load_state_dict()`, in a sandbox.

A `ResumePlan` is plain data: the dataset (map-style of `n` items, or iterable shards, with or
without a `state_dict` of its own), the loader's arguments (a seeded generator for a shuffle is
made afresh for every loader), the epochs, and the `Cut`s: where the user takes a state, drops
the loader and builds a new one that loads it. `faultinject.driver.run(loader, plan)` plays, in
one `faultinject.sandbox` child (`drive` is its target), the uninterrupted run (segment -1) and
then the interrupted one (segments 0, 1, ...: one loader each, the last one to the end), each
loader driven by `faultinject._play`'s driver, and streams one event per step
(`faultinject.events`, its `seg` set): `Batch`, `Stop`, `Error`, `StateTaken`,
`StateChanged`, `Moved`, `NoState`, `Refused`.

A resumed segment loads the state as pickled when `state_dict()` returned it (what a checkpoint on
disk holds), or, with `Cut.resume_from="earlier"`, the earlier of two states taken in one epoch.
Grading is not this module's job (`conformance.harness.resume`).
"""

from __future__ import annotations

import gc
import io
import pickle
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

from loaderspec.faultinject import _fire, loaders, sandbox, user_state
from loaderspec.faultinject._play import Driver
from loaderspec.faultinject.datasets import SHARD_STRIDE, FaultyDataset, FaultyIterable
from loaderspec.faultinject.events import (
    Error,
    Moved,
    NoState,
    StateChanged,
    StateTaken,
)
from loaderspec.faultinject.plan import BeforeLoad, Cut, Leave, Moment, ResumePlan
from torch.utils.data import IterableDataset

__all__ = [
    "BeforeLoad",
    "Cut",
    "Moment",
    "ResumePlan",
    "StatefulShards",
    "dataset",
    "drive",
    "refusal",
]


def dataset(plan: ResumePlan, scratch: str | None = None) -> tuple[Any, dict[str, Any]]:
    """A fresh dataset of the plan, and the loader arguments it comes with (a sampler);
    `scratch`: a folder for what the dataset's workers mark (`user_state.build`)."""
    if plan.user is not None:
        return user_state.build(plan.user, plan.n, scratch)
    if plan.shards is None:
        return FaultyDataset(plan.n, plan.faults), {}
    if plan.dataset_state:
        return StatefulShards(plan.shards), {}
    return FaultyIterable(plan.shards), {}


class StatefulShards(IterableDataset[int]):
    """Shards as `FaultyIterable`'s (worker w of W reads shards w, w + W, ...; shard s yields
    `s * SHARD_STRIDE + k`), with a `state_dict` of its own: how many of its items this copy has
    read in the current pass, 0 again once the pass ran dry (its state then says what it does
    next: a whole pass, as torchdata's Stateful protocol reads a state taken at StopIteration).
    After `load_state_dict` the next pass starts there (once)."""

    def __init__(self, shard_lengths: tuple[int, ...]) -> None:
        self.shard_lengths = tuple(shard_lengths)
        self.read = 0
        self._start = 0

    def _items(self) -> list[int]:
        info = _fire.worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        shards = range(first, len(self.shard_lengths), step)
        return [s * SHARD_STRIDE + k for s in shards for k in range(self.shard_lengths[s])]

    def __iter__(self) -> Iterator[int]:
        start, self._start = self._start, 0
        self.read = start
        for value in self._items()[start:]:
            self.read += 1
            yield value
        self.read = 0

    def state_dict(self) -> dict[str, int]:
        return {"read": self.read}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self._start = int(state["read"])

    def __repr__(self) -> str:
        return f"StatefulShards({list(self.shard_lengths)})"


# --------------------------------------------------------------------------- the child side


class _Resume(Driver):
    """The plan, played in the sandbox child: `_play`'s driver, one segment (`seg`) at a time."""

    text_limit = 500
    plan: ResumePlan

    def __init__(self, cls: type, plan: ResumePlan, scratch: str | None) -> None:
        super().__init__(cls, plan, None)
        self.scratch = scratch  # a folder the plan's dataset may mark fetches in
        self.extra: dict[str, Any] = {}  # what the dataset comes with (a sampler)
        self.states: list[tuple[str, int, int, Any, bytes]] = []
        self.loader: Any = None  # the segment's loader, while an epoch of it is played
        self.cut: Cut | None = None  # the epoch's cut, while taken with the iterator alive
        self.later: int | None = None  # batches still to take after the cut's state

    def failed(self, epoch: int | None, at: str, exc: BaseException) -> None:
        """Note an error of a call other than `next()`."""
        self.error(epoch, time.monotonic(), exc, at=at)

    @property
    def steps_bound(self) -> int:
        """More next() calls than an epoch has tasks: a loader that never ends after an error."""
        return self.plan.n + sum(self.plan.shards or ()) + 1

    def dataset(self) -> Any:
        data, self.extra = dataset(self.plan, self.scratch)
        return data

    def kwargs(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The segment's loader arguments (`Driver.kwargs` of a resumed one's `resume_kwargs`),
        with a fresh seeded generator and what the dataset comes with."""
        import torch

        plan = self.plan
        resumed = self.seg is not None and self.seg > 0
        out = super().kwargs(plan.resume_kwargs if resumed and given is None else given)
        if plan.seed is not None:
            out["generator"] = torch.Generator().manual_seed(plan.seed)
        out.update(self.extra)
        return out

    def built(self, loader: Any, start: float) -> None:
        """No `Built` event: a resume's first event is its first step (a batch, a state, an
        error), which the harness may bound (`driver.run(first_event_s=...)`)."""

    def build(self, seg: int) -> Any:
        """Segment `seg`'s loader (None: its constructor refused the configuration, noted)."""
        import torch

        self.seg = seg
        if self.plan.global_seed is not None:
            torch.manual_seed(self.plan.global_seed)
        return self.construct()

    def take(self, epoch: int, loader: Any, which: str, after: int) -> bytes | None:
        """`loader.state_dict()`, pickled as returned (None: it raised or does not pickle)."""
        import torch

        start = time.monotonic()
        try:
            state = loader.state_dict()
            pickled = pickle.dumps(state)
        except Exception as exc:
            self.failed(epoch, "state_dict", exc)
            return None
        weights_only = None
        try:
            buf = io.BytesIO()
            torch.save(state, buf)
            buf.seek(0)
            torch.load(buf, weights_only=True)
        except Exception as exc:
            weights_only = f"{type(exc).__name__}: {exc}"[:300]
        self.note(
            StateTaken,
            epoch,
            start,
            which=which,
            after=after,
            bytes=len(pickled),
            weights_only=weights_only,
        )
        self.states.append((which, epoch, after, state, pickled))
        return pickled

    def play(self) -> None:
        loaders.start_process_helpers(self.cls)  # what the loader keeps per process: no leak
        sandbox.mark_baseline()
        plan = self.plan
        if plan.uninterrupted:
            loader = self.build(-1)
            if loader is None:
                return
            for epoch in range(plan.epochs):
                if not self.segment_epoch(loader, epoch, None):
                    break
            del loader
            gc.collect()
        state: bytes | None = None
        start_epoch = 0
        for seg, cut in enumerate((*plan.cuts, None)):
            loader = self.build(seg)
            if loader is None:
                return
            self.states = []
            if state is not None and not self.load(loader, state):
                return
            state, start_epoch = self.segment(loader, cut, start_epoch)
            for which, epoch, after, obj, pickled in self.states:
                with_later = pickle.dumps(obj)
                if with_later != pickled:
                    self.note(StateChanged, epoch, time.monotonic(), which=which, after=after)
            self.states = []
            del loader
            gc.collect()
            if cut is not None and state is None:
                return  # no state to resume from (state_dict raised: reported)

    def load(self, loader: Any, state: bytes) -> bool:
        moved = self.plan.before_load
        start = time.monotonic()
        try:
            if moved == "iter":
                it = iter(loader)
                next(it)
                self.note(Moved, None, start, how=moved)
            elif moved == "state_dict":
                loader.state_dict()
                self.note(Moved, None, start, how=moved)
            loader.load_state_dict(pickle.loads(state))
        except Exception as exc:
            self.failed(None, "load", exc)
            return False
        return True

    def segment(self, loader: Any, cut: Cut | None, start: int) -> tuple[bytes | None, int]:
        """Play from epoch `start` until `cut` (or to the end); the state the next segment
        resumes from, and the epoch it resumes in."""
        if cut is not None and cut.how == "after_load":
            return self.take(start, loader, "cut", 0), start
        for epoch in range(start, self.plan.epochs):
            mine = cut if cut is not None and cut.epoch == epoch else None
            if mine is not None and mine.how == "before_iter":
                return self.take(epoch, loader, "cut", 0), epoch
            taken = self.segment_epoch(loader, epoch, mine)
            if mine is not None:
                resumed = self.resumed_state(mine)
                return resumed, epoch + 1 if mine.how == "end" else epoch
            if not taken:
                return None, epoch
        return None, self.plan.epochs

    def resumed_state(self, cut: Cut) -> bytes | None:
        wanted = "earlier" if cut.resume_from == "earlier" else "cut"
        return next((p for which, _, _, _, p in self.states if which == wanted), None)

    @property
    def max_errors(self) -> int:
        """With faults, an error is handed out in its turn and the epoch goes on (up to more
        calls than it has tasks: a loader that never ends after an error); else the first
        error ends the segment."""
        return self.steps_bound if self.plan.faults else 0

    def before_next(self, epoch: int, taken: int, calls: int) -> bool:
        """The plan's moves (`Driver.before_next`), then the epoch's cut: take the states
        (after `calls` calls: an error handed out in its turn is a step, as a batch is), then
        the batches still to take after it (False: the segment ends here)."""
        if not super().before_next(epoch, taken, calls):
            return False
        cut = self.cut
        if cut is not None and self.later is None:
            if calls == cut.earlier:
                self.take(epoch, self.loader, "earlier", calls)
                self.kept = cut.resume_from != "earlier"
            if calls == cut.after:
                self.take(epoch, self.loader, "cut", calls)
                self.kept, self.later = False, cut.later
        if self.later is not None:
            if self.later == 0:
                return False
            self.later -= 1
        return True

    def after_batch(self, epoch: int, taken: int) -> bool:
        user_state.mark_handed(self.scratch)
        return super().after_batch(epoch, taken)

    def segment_epoch(self, loader: Any, epoch: int, cut: Cut | None) -> bool:
        """One epoch of the segment (`Driver.calls`; False: it ended in an error)."""
        if cut is not None and cut.how == "break":
            return self.broken_loop(loader, epoch, cut)
        user_state.new_iterator(self.scratch)
        start = time.monotonic()
        try:
            self.it = iter(loader)
        except Exception as exc:
            self.error(epoch, start, exc, at="iter")
            return False
        self.loader = loader
        self.cut = cut if cut is not None and cut.how == "next" else None
        self.kept, self.later = True, None  # later: batches still to take after the cut
        played = self.calls(epoch)
        ended = not isinstance(played.last, Error)
        if ended and cut is not None and cut.how == "end":
            self.take(epoch, loader, "cut", played.calls)  # the iterator still alive, as a user's
        # The segment lets go of its loader and iterator (the caller drops the loader).
        self.it = self.loader = self.cut = None
        self.kept = True
        return ended

    def broken_loop(self, loader: Any, epoch: int, cut: Cut) -> bool:
        """The user's `for` loop, left by `break` after `cut.after` batches (`Driver.leave_loop`),
        then the state (False: the loop raised)."""
        user_state.new_iterator(self.scratch)
        played = self.leave_loop(loader, epoch, Leave("break", cut.after))
        if isinstance(played.last, Error):
            if played.last.type in {f.exc_type.__name__ for f in self.plan.faults}:
                # The user's loop raised before its break: the run ends with no state, an
                # outcome of its own (not a resume that lost the rest of the epoch).
                self.note(NoState, epoch, time.monotonic(), after=played.taken)
            return False
        self.take(epoch, loader, "cut", played.taken)
        return True


def drive(cls: type, plan: ResumePlan) -> None:
    """The sandbox target."""
    with tempfile.TemporaryDirectory(prefix="loaderspec-resume-") as scratch:
        _Resume(cls, plan, scratch).play()


# --------------------------------------------------------------------------- the harness side


def refusal(loader: type, plan: ResumePlan) -> str | None:
    """Why the loader cannot play `plan` (None: it can): a configuration, first or resumed,
    that it declares it cannot express (`faultinject.loaders.unsupported`)."""
    data, extra = dataset(plan)
    for kwargs in (plan.kwargs, plan.resume_kwargs or {}):
        why = loaders.unsupported(loader, {**kwargs, **extra}, dataset=data)
        if why:
            return why
    return None
