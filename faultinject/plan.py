"""The plan: what a user does with a loader, as plain data (`Plan`, `Leave`, `Await`), and its
two extensions: `RankPlan` (the same loader on every rank of a `torch.distributed` group) and
`ResumePlan` (a checkpoint and resume: `Cut`s where the user takes a state and goes on with a new
loader).

A `Plan` names the faulty dataset (its length or shards, its faults), the loader's constructor
arguments (torch's `DataLoader` arguments) and how the user iterates (epochs; leaving an epoch
early by `del`, `break`, an exception in the loop, or the loader's process being SIGKILLed; one
worker SIGKILLed from outside; `next()` after StopIteration). Every plan is played in a sandbox
child by `faultinject.driver.run` (one loader: `faultinject._play`; its extensions:
`faultinject.ranks`, `faultinject.resume`, which drive their loaders with `_play`'s driver). Knows
no loader and no grading.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from loaderspec.faultinject.faults import Fault, Raise

if TYPE_CHECKING:
    from loaderspec.faultinject.user_state import UserKind

__all__ = [
    "MUST_BOUND_S",
    "Await",
    "BeforeLoad",
    "Cut",
    "Leave",
    "Moment",
    "Plan",
    "RankPlan",
    "ResumePlan",
]

# How long the driver waits for what a correct loader does at once (workers gone after a drop, a
# fetch to start): the suite's MUST bound, 3 x torch's 5 s status-check interval.
MUST_BOUND_S = 15.0


@dataclass(frozen=True)
class Leave:
    """The user leaves an epoch after `after` batches (`counting="calls"`: `next()` calls, errors
    included): `"drop"` (`del it`), `"break"` or `"raise"` (out of a `for` loop), or
    `"kill_parent"` (the loader's process is SIGKILLed: `sandbox.kill_self()`)."""

    how: Literal["drop", "break", "raise", "kill_parent"]
    after: int
    counting: Literal["batches", "calls"] = "batches"


@dataclass(frozen=True)
class Await:
    """Wait (bounded by `timeout_s`) until `count` fetch records of `event` (`"fetch"`: started,
    `"fetched"`: made, `"fault"`: a fault about to fire) of item `index` (None: any) exist."""

    event: Literal["fetch", "fetched", "fault"] = "fetch"
    index: int | None = None
    count: int = 1
    timeout_s: float = MUST_BOUND_S


@dataclass(frozen=True)
class Plan:
    """What the user does with a loader. Picklable (it travels to the sandbox child).

    The dataset is `FaultyDataset(n, faults)` (items: the index; `item(index)` if given), or
    `FaultyIterable(shards, faults)` when `shards` is set; every fetch takes `cost_s`. With
    `tag_epochs` every item is `[index, epoch it was dispatched in]` (an `EpochSampler` is passed
    as the loader's `sampler`). `kwargs` are the loader's constructor arguments. `leave`
    maps an epoch to how the user leaves it early; `before_leave` is awaited first.
    `kill_worker_after`: after that many batches of epoch 0, SIGKILL the live worker with the
    lowest pid (after `before_kill`). `kill_worker_before_epoch`: the same kill between epochs,
    before that epoch's `iter()` (persistent workers sitting idle).
    An epoch ends at StopIteration, at a leave, after `max_errors + 1` errors, at the first of
    the loader's own fatal errors with `stop_at_fatal` (a RuntimeError naming the DataLoader: a
    worker death or a timeout), or `calls_after_error` calls after its first error.
    `calls_after_stop`: `next()` calls after StopIteration. `hold_after_error_s`: an epoch
    that ended in an error keeps its iterator while the driver waits up to that long for the
    loader's worker processes to be gone (an `AliveAfterError` event names those left), then
    drops it. `drop_wait_s`: how long the workers may take to go once the epoch's iterator was
    dropped (an `AliveAfterDrop` event names those left). `pause_s`: after each batch, wait up
    to that long for more than `pause_ahead` items fetched beyond those consumed (a `Paused`
    event counts them; the suite sets `pause_ahead` to the window it checks).
    `fd_headroom`: the file descriptors the loader's process may still open (RLIMIT_NOFILE is
    set that far above those open when the loader is built, whatever the harness inherited).
    `once_dir`: where faults with `once=True` mark that they fired (None: a folder of this run
    only); a folder kept across runs makes such a fault fire in the first run only (a delay
    injected once, then replays without it).
    `setup` / `teardown`: module-level callables run in the child before the loader is built /
    after it was dropped (an accelerator, a tracer). `loaders`: build, iterate and drop that many
    loaders one after the other (epochs are numbered on across them; each `loader_dropped` event
    says how many fds the process then had open). `render`: a batch event's value is the batch
    `flat` (plain values) or as its `structure` (`describe`: types and nesting kept).
    """

    n: int = 8
    shards: tuple[int, ...] | None = None
    faults: tuple[Fault, ...] = ()
    item: Callable[[int], Any] | None = None
    cost_s: float = 0.0
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    epochs: int = 1
    leave: Mapping[int, Leave] = field(default_factory=dict)
    before_leave: Await | None = None
    kill_worker_after: int | None = None
    before_kill: Await | None = None
    kill_worker_before_epoch: int | None = None
    max_errors: int = 0
    stop_at_fatal: bool = False
    calls_after_error: int | None = None
    calls_after_stop: int = 0
    hold_after_error_s: float = 0.0
    drop_wait_s: float = MUST_BOUND_S
    max_events: int = 10_000
    pause_s: float = 0.0
    pause_ahead: int = 0
    tag_epochs: bool = False
    records: bool = False
    record_inits: bool = False
    fd_headroom: int | None = None
    len_of_loader: bool = False
    in_thread: bool = False
    setup: Callable[[], Any] | None = None
    teardown: Callable[[], Any] | None = None
    loaders: int = 1
    render: Literal["flat", "structure"] = "flat"
    once_dir: str | None = None

    def argument_names(self) -> set[str]:
        """The names of the loader's constructor arguments the driver passes: `kwargs`, and what
        the plan adds (a collate_fn or worker_init_fn carrying faults, an `EpochSampler`)."""
        names = set(self.kwargs)
        points = {getattr(f, "point", None) for f in self.faults}
        if "in_collate" in points:
            names.add("collate_fn")
        if "in_worker_init" in points or self.record_inits:
            names.add("worker_init_fn")
        if self.tag_epochs:
            names.add("sampler")
        return names

    @property
    def iterators(self) -> int:
        """At most how many `iter()` calls playing the plan makes."""
        return self.epochs * self.loaders

    @property
    def uses_records(self) -> bool:
        """Whether the dataset writes fetch records (something waits on them, or asks)."""
        return bool(
            self.records or self.before_leave or self.before_kill or self.pause_s or self.tag_epochs
        )


# --------------------------------------------------------------------------- a rank group


@dataclass(frozen=True)
class RankPlan(Plan):
    """A `Plan` played on `world` ranks at once (`faultinject.ranks`). Picklable.

    `iterable`: each rank reads a `RankShardedIterable(n, rank, world)`; else a map-style
    dataset of `n` items (the index each) behind `DistributedSampler(dataset, world, rank,
    shuffle=shuffle, seed=seed, drop_last=sampler_drop_last)`, passed as the loader's `sampler`.
    `kwargs`: the loader's other arguments. `step_timeout_s`: the group's collective timeout.
    `resume_at=(epoch, k)`: after k batches of that epoch every rank takes its loader's
    `state_dict()`, drops the loader and goes on with a new one (a new sampler of the same rank,
    `set_epoch(epoch)`) that loads the state, pickled as a checkpoint on disk would be.
    `drop_wait_s`: how long a rank's workers may take to go after its loader's drop.
    """

    n: int = 12
    epochs: int = 3
    world: int = 2
    iterable: bool = False
    shuffle: bool = True
    seed: int = 0
    sampler_drop_last: bool = False
    step_timeout_s: float = 3.0
    resume_at: tuple[int, int] | None = None

    def argument_names(self) -> set[str]:
        return super().argument_names() | (set() if self.iterable else {"sampler"})

    @property
    def iterators(self) -> int:
        """How many `iter()` calls each rank makes: one per epoch, one more after a resume."""
        return self.epochs + (self.resume_at is not None)


# --------------------------------------------------------------------------- checkpoint and resume

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
class ResumePlan(Plan):
    """A `Plan` played twice, uninterrupted and then cut into segments (`faultinject.resume`).
    Picklable.

    `shards`: an IterableDataset of these shard lengths (`FaultyIterable`, or `StatefulShards`
    with `dataset_state`); else a map-style `FaultyDataset(n, faults)`. `seed`: shuffle with
    `torch.Generator().manual_seed(seed)`, a fresh one per loader. `cuts`: where each segment
    takes the state the next one resumes from. `resume_kwargs`: the resumed loaders' arguments
    (another num_workers), else `kwargs`. `before_load`: what a resumed loader is put through
    before `load_state_dict`. `uninterrupted`: play the uninterrupted run first (segment -1).
    `faults`: items that raise when fetched (map-style): each error is handed out in its turn and
    the epoch goes on, in every run, so a state may be taken after a fault (an error counts as a
    step, like a batch). `user`: a dataset or sampler of `n` items with a state of its own
    (`faultinject.user_state`) instead. `global_seed`: the user's restart,
    `torch.manual_seed(global_seed)` before every loader is built (the uninterrupted one and
    each segment's), so what draws from torch's global RNG is reproducible and a resume must
    restore what it drew since.
    """

    n: int = 12
    epochs: int = 2
    faults: tuple[Raise, ...] = ()
    dataset_state: bool = False
    seed: int | None = None
    cuts: tuple[Cut, ...] = (Cut(),)
    resume_kwargs: Mapping[str, Any] | None = None
    before_load: BeforeLoad = "nothing"
    uninterrupted: bool = True
    user: UserKind | None = None
    global_seed: int | None = None

    @property
    def iterators(self) -> int:
        """At most how many `iter()` calls playing the plan makes: one per epoch of the
        uninterrupted run and of the interrupted one, one more per cut (its epoch is played
        again by the resumed loader), and one per resumed loader put through `iter()` before
        its load."""
        again = len(self.cuts) * (2 if self.before_load == "iter" else 1)
        return (self.epochs if self.uninterrupted else 0) + self.epochs + again
