"""Checkpoint and resume any loader that has `state_dict()` / `load_state_dict()`, in a sandbox.

A `ResumePlan` is plain data: the dataset (map-style of `n` items, or iterable shards, with or
without a `state_dict` of its own), the loader's arguments (a seeded generator for a shuffle is
made afresh for every loader), the epochs, and the `Cut`s: where the user takes a state, drops
the loader and builds a new one that loads it. `run(loader, plan)` plays, in one
`faultinject.sandbox` child, the uninterrupted run (segment -1) and then the interrupted one
(segments 0, 1, ...: one loader each, the last one to the end), and streams one event per step
(`faultinject.resume_events`): `ResumeBatch`, `ResumeStop`, `ResumeError`, `StateTaken`,
`StateChanged`, `Moved`, `ResumeRefused`.

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
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard, TypeVar

from loaderspec.faultinject import _fire, loaders, sandbox, user_state
from loaderspec.faultinject.datasets import SHARD_STRIDE, FaultyDataset, FaultyIterable
from loaderspec.faultinject.driver import MUST_BOUND_S, flat
from loaderspec.faultinject.faults import Raise
from loaderspec.faultinject.resume_events import (
    Moved,
    NoState,
    ResumeBatch,
    ResumeError,
    ResumeEvent,
    ResumeRefused,
    ResumeStop,
    StateChanged,
    StateTaken,
)
from loaderspec.faultinject.sandbox import SandboxReport
from loaderspec.faultinject.user_state import UserKind
from torch.utils.data import IterableDataset

__all__ = ["Cut", "ResumePlan", "ResumeRun", "StatefulShards", "run"]

Moment = Literal["next", "break", "end", "before_iter", "after_load"]
# What a resumed loader is asked before its load_state_dict (ResumePlan.before_load).
BeforeLoad = Literal["nothing", "iter", "state_dict"]


@dataclass(frozen=True)
class Cut:
    """Where a segment takes its state: in `epoch` (the user's count, across segments), after
    `after` batches of it (counted from this segment's own start: a resumed segment's first
    batch is its 1st) with the iterator alive (`"next"`), after `after` batches and a
    `break` out of a `for` loop (`"break"`), after its StopIteration (`"end"`), before its
    `iter()` (`"before_iter"`), or at once after `load_state_dict` (`"after_load"`, a resumed
    segment: `epoch` and `after` unused). `earlier`: also take a state after that many batches of
    the same epoch (twice in one epoch); `resume_from="earlier"` resumes from that one. `later`:
    batches the segment still takes after its state, before the loader is dropped."""

    epoch: int = 0
    after: int = 0
    how: Moment = "next"
    earlier: int | None = None
    resume_from: Literal["cut", "earlier"] = "cut"
    later: int = 0


@dataclass(frozen=True)
class ResumePlan:
    """What the user does (see the module docstring). Picklable.

    `shards`: an IterableDataset of these shard lengths (`FaultyIterable`, or `StatefulShards`
    with `dataset_state`); else a map-style `FaultyDataset(n)`. `seed`: shuffle with
    `torch.Generator().manual_seed(seed)`, a fresh one per loader. `resume_kwargs`: the resumed
    loaders' arguments (another num_workers), else `kwargs`. `before_load`: what a resumed
    loader is put through before `load_state_dict`. `faults`: items that raise when fetched
    (map-style): each error is handed out in its turn and the epoch goes on, in every run, so
    a state may be taken after a fault (an error counts as a step, like a batch). `user`: a
    dataset or sampler of `n` items with a state of its own (`faultinject.user_state`) instead.
    `global_seed`: the user's restart, `torch.manual_seed(global_seed)` before every loader is
    built (the uninterrupted one and each segment's), so what draws from torch's global RNG is
    reproducible and a resume must restore what it drew since.
    """

    n: int = 12
    shards: tuple[int, ...] | None = None
    dataset_state: bool = False
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None
    epochs: int = 2
    cuts: tuple[Cut, ...] = (Cut(),)
    resume_kwargs: Mapping[str, Any] | None = None
    before_load: BeforeLoad = "nothing"
    uninterrupted: bool = True
    faults: tuple[Raise, ...] = ()
    user: UserKind | None = None
    global_seed: int | None = None

    def dataset(self, scratch: str | None = None) -> tuple[Any, dict[str, Any]]:
        """A fresh dataset of the plan, and the loader arguments it comes with (a sampler);
        `scratch`: a folder for what the dataset's workers mark (`user_state.build`)."""
        if self.user is not None:
            return user_state.build(self.user, self.n, scratch)
        if self.shards is None:
            return FaultyDataset(self.n, self.faults), {}
        if self.dataset_state:
            return StatefulShards(self.shards), {}
        return FaultyIterable(self.shards), {}

    @property
    def iterators(self) -> int:
        """At most how many `iter()` calls playing the plan makes: one per epoch of the
        uninterrupted run and of the interrupted one, one more per cut (its epoch is played
        again by the resumed loader), and one per resumed loader put through `iter()` before
        its load."""
        again = len(self.cuts) * (2 if self.before_load == "iter" else 1)
        return (self.epochs if self.uninterrupted else 0) + self.epochs + again


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


class _Resume:
    """The plan, played in the sandbox child."""

    def __init__(self, cls: type, plan: ResumePlan) -> None:
        self.cls, self.plan = cls, plan
        self.scratch: str | None = None  # a folder the plan's dataset may mark fetches in

    def event(self, cls: type[ResumeEvent], seg: int, epoch: int | None, **fields: Any) -> None:
        """Send the harness one `cls` event of segment `seg`."""
        sandbox.note(cls(epoch=epoch, t=time.monotonic(), dt=0.0, seg=seg, **fields))

    def error(self, seg: int, epoch: int | None, at: str, exc: BaseException, **extra: Any) -> None:
        text = f"{type(exc).__name__}: {exc}"[:500]
        self.event(ResumeError, seg, epoch, at=at, type=type(exc).__name__, text=text, **extra)

    @property
    def steps_bound(self) -> int:
        """More next() calls than an epoch has tasks: a loader that never ends after an error."""
        return self.plan.n + sum(self.plan.shards or ()) + 1

    def build(self, seg: int) -> Any:
        import torch

        plan = self.plan
        kwargs = dict(plan.kwargs if seg <= 0 or plan.resume_kwargs is None else plan.resume_kwargs)
        if plan.global_seed is not None:
            torch.manual_seed(plan.global_seed)
        if plan.seed is not None:
            kwargs["generator"] = torch.Generator().manual_seed(plan.seed)
        data, extra = plan.dataset(self.scratch)
        kwargs.update(extra)
        try:
            return self.cls(data, **kwargs)
        except NotImplementedError as exc:
            reason = str(exc) or "NotImplementedError from the constructor"
            self.event(ResumeRefused, seg, None, reason=reason)
        return None

    def take(self, seg: int, epoch: int, loader: Any, which: str, after: int) -> bytes | None:
        """`loader.state_dict()`, pickled as returned (None: it raised or does not pickle)."""
        import torch

        try:
            state = loader.state_dict()
            pickled = pickle.dumps(state)
        except Exception as exc:
            self.error(seg, epoch, "state_dict", exc)
            return None
        weights_only = None
        try:
            buf = io.BytesIO()
            torch.save(state, buf)
            buf.seek(0)
            torch.load(buf, weights_only=True)
        except Exception as exc:
            weights_only = f"{type(exc).__name__}: {exc}"[:300]
        self.event(
            StateTaken,
            seg,
            epoch,
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
                if not self.epoch(-1, loader, epoch, None):
                    break
            del loader
            gc.collect()
        state: bytes | None = None
        start_epoch = 0
        for seg, cut in enumerate((*plan.cuts, None)):
            loader = self.build(seg)
            if loader is None:
                return
            self.states: list[tuple[str, int, int, Any, bytes]] = []
            if state is not None and not self.load(seg, loader, state):
                return
            state, start_epoch = self.segment(seg, loader, cut, start_epoch)
            for which, epoch, after, obj, pickled in self.states:
                with_later = pickle.dumps(obj)
                if with_later != pickled:
                    self.event(StateChanged, seg, epoch, which=which, after=after)
            self.states = []
            del loader
            gc.collect()
            if cut is not None and state is None:
                return  # no state to resume from (state_dict raised: reported)

    def load(self, seg: int, loader: Any, state: bytes) -> bool:
        moved = self.plan.before_load
        try:
            if moved == "iter":
                it = iter(loader)
                next(it)
                self.event(Moved, seg, None, how=moved)
            elif moved == "state_dict":
                loader.state_dict()
                self.event(Moved, seg, None, how=moved)
            loader.load_state_dict(pickle.loads(state))
        except Exception as exc:
            self.error(seg, None, "load", exc)
            return False
        return True

    def segment(
        self, seg: int, loader: Any, cut: Cut | None, start: int
    ) -> tuple[bytes | None, int]:
        """Play from epoch `start` until `cut` (or to the end); the state the next segment
        resumes from, and the epoch it resumes in."""
        if cut is not None and cut.how == "after_load":
            return self.take(seg, start, loader, "cut", 0), start
        for epoch in range(start, self.plan.epochs):
            mine = cut if cut is not None and cut.epoch == epoch else None
            if mine is not None and mine.how == "before_iter":
                return self.take(seg, epoch, loader, "cut", 0), epoch
            taken = self.epoch(seg, loader, epoch, mine)
            if mine is not None:
                resumed = self.resumed_state(mine)
                return resumed, epoch + 1 if mine.how == "end" else epoch
            if not taken:
                return None, epoch
        return None, self.plan.epochs

    def resumed_state(self, cut: Cut) -> bytes | None:
        wanted = "earlier" if cut.resume_from == "earlier" else "cut"
        return next((p for which, _, _, _, p in self.states if which == wanted), None)

    def epoch(self, seg: int, loader: Any, epoch: int, cut: Cut | None) -> bool:
        """One epoch of segment `seg` (False: it ended in an error)."""
        if cut is not None and cut.how == "break":
            return self.broken_loop(seg, loader, epoch, cut)
        user_state.new_iterator(self.scratch)
        try:
            it = iter(loader)
        except Exception as exc:
            self.error(seg, epoch, "iter", exc)
            return False
        taken, kept, later = 0, True, None  # later: batches still to take after the cut
        while True:
            if cut is not None and cut.how == "next" and later is None:
                if taken == cut.earlier:
                    self.take(seg, epoch, loader, "earlier", taken)
                    kept = cut.resume_from != "earlier"
                if taken == cut.after:
                    self.take(seg, epoch, loader, "cut", taken)
                    kept, later = False, cut.later
            if later is not None:
                if later == 0:
                    return True
                later -= 1
            try:
                batch = next(it)
            except StopIteration:
                self.event(ResumeStop, seg, epoch)
                break
            except Exception as exc:
                self.error(seg, epoch, "next", exc, kept=kept)
                if not self.plan.faults or taken > self.steps_bound:
                    return False
                taken += 1  # an error handed out in its turn: a step, as a batch is
                continue
            taken += 1
            user_state.mark_handed(self.scratch)
            self.event(ResumeBatch, seg, epoch, value=flat(batch), kept=kept)
        if cut is not None and cut.how == "end":
            self.take(seg, epoch, loader, "cut", taken)
        return True

    def broken_loop(self, seg: int, loader: Any, epoch: int, cut: Cut) -> bool:
        taken = 0
        user_state.new_iterator(self.scratch)
        try:
            for batch in loader:
                taken += 1
                user_state.mark_handed(self.scratch)
                self.event(ResumeBatch, seg, epoch, value=flat(batch))
                if taken >= cut.after:
                    break
            else:
                self.event(ResumeStop, seg, epoch)
        except Exception as exc:
            self.error(seg, epoch, "next", exc)
            if type(exc).__name__ in {f.exc_type.__name__ for f in self.plan.faults}:
                # The user's loop raised before its break: the run ends with no state, an
                # outcome of its own (not a resume that lost the rest of the epoch).
                self.event(NoState, seg, epoch, after=taken)
            return False
        self.take(seg, epoch, loader, "cut", taken)
        return True


def drive(loader: type, plan: ResumePlan) -> None:
    """The sandbox target."""
    with tempfile.TemporaryDirectory(prefix="loaderspec-resume-") as scratch:
        player = _Resume(loader, plan)
        player.scratch = scratch
        player.play()


# --------------------------------------------------------------------------- the harness side


E = TypeVar("E", bound=ResumeEvent)


@dataclass
class ResumeRun:
    """A played resume plan: the sandbox's report and the events."""

    plan: ResumePlan
    report: SandboxReport | None
    events: list[ResumeEvent] = field(default_factory=list)
    refused: str | None = None

    def of(self, seg: int | None, kind: type[E], epoch: int | None = None) -> list[E]:
        """Events of segment `seg` (None: any) of class `kind` (and `epoch`), in order."""
        return [
            e
            for e in self.events
            if isinstance(e, kind) and seg in (None, e.seg) and epoch in (None, e.epoch)
        ]

    def uninterrupted(self) -> dict[int, list[Any]]:
        """Epoch -> the batches the uninterrupted run handed out."""
        out: dict[int, list[Any]] = {e: [] for e in range(self.plan.epochs)}
        for ev in self.events:
            if ev.seg == -1 and ev.epoch is not None and _handed_out(ev):
                out[ev.epoch].append(_value(ev))
        return out

    def resumed(self) -> dict[int, list[Any]]:
        """Epoch -> the batches the interrupted run handed out that count: every segment's up
        to the state the next one resumed from, then the last segment's."""
        out: dict[int, list[Any]] = {e: [] for e in range(self.plan.epochs)}
        for ev in self.events:
            if ev.seg >= 0 and ev.epoch is not None and _handed_out(ev) and ev.kept:
                out[ev.epoch].append(_value(ev))
        return out


def _handed_out(ev: ResumeEvent) -> TypeGuard[ResumeBatch | ResumeError]:
    """A batch, or an error handed out in its turn by next()."""
    return isinstance(ev, ResumeBatch) or (isinstance(ev, ResumeError) and ev.at == "next")


def _value(ev: ResumeBatch | ResumeError) -> Any:
    return ev.value if isinstance(ev, ResumeBatch) else [f"error {ev.type}"]


def run(
    loader: type,
    plan: ResumePlan,
    *,
    deadline_s: float,
    linger_s: float = MUST_BOUND_S,
    first_event_s: float | None = None,
) -> ResumeRun:
    """Play `plan` against `loader` in a sandbox; never raises for what the loader does.
    `first_event_s`: a run with no event that long ends there, as past its deadline."""
    data, extra = plan.dataset()
    for kwargs in (plan.kwargs, plan.resume_kwargs or {}):
        why = loaders.unsupported(loader, {**kwargs, **extra}, dataset=data)
        if why:
            return ResumeRun(plan, None, refused=why)
    report = sandbox.run(
        drive, loader, plan, deadline_s=deadline_s, linger_s=linger_s, first_note_s=first_event_s
    )
    events = [n for n in report.notes if isinstance(n, ResumeEvent)]
    refused = next((e.reason for e in events if isinstance(e, ResumeRefused)), None)
    return ResumeRun(plan, report, events, refused=refused)
