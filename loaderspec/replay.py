"""Play one fault schedule against a loader class, through the conformance suite's driver.

Owns ``Schedule``: a loader configuration plus the faults to inject and the user's moves (how
many epochs, when to break off, when the loader's process is killed), as a spec behaviour
describes them (``loaderspec.scenarios`` derives schedules from the spec; the trace tests draw
them). ``play`` turns a schedule into a ``faultinject.driver.Plan`` and plays it in a sandbox
against any torch-compatible loader class, black-box, like every conformance case; the result
is graded by the suite's own property checks (``loaderspec.scenarios.violations``). With
``trace_dir`` the reference loader's trace records land there (each iterator's ``Config`` header
included: the loader writes it, docs/contracts.md), so ``loaderspec trace-check`` can check the
run. Must not know TLA+.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderspec import tracewriter
from loaderspec.faultinject import loaders
from loaderspec.faultinject.datasets import Wide
from loaderspec.faultinject.driver import MUST_BOUND_S, Leave, Plan, Run, run
from loaderspec.vocabulary import FORCE_PIN_THREAD_ENV, TRACE_DIR_ENV

REFERENCE = "loaderspec.reference:DataLoader"
# Timeouts in schedules: long enough that a loaded CI machine does not time out by accident,
# short enough that a hang costs little.
TIMEOUT_S = 1.0
HANG_S = 30.0  # a hung fetch lasts this long at most; the loader must not wait for it
# Errors an epoch may raise and go on (injected errors); the loader's own fatal error ends it.
_MAX_ERRORS = 1_000
# Faults whose item default_collate would reject before the loader ever sends it.
_PASS_THROUGH_COLLATE = frozenset({"Unpicklable", "Unloadable"})


@dataclass(frozen=True)
class Schedule:
    """A loader configuration and what goes wrong when (all picklable, for the sandbox).

    ``faults`` are ``faultinject.faults`` instances (their ``at`` is a dataset index, or an item
    number in a worker's shard when ``shard_lengths`` makes the dataset iterable).
    ``drop_at``/``kill_parent_at`` are ``(epoch, n)``: after ``n`` successful or failed
    ``next()`` calls of that epoch the user breaks off / the loader's process is SIGKILLed.
    """

    name: str
    num_workers: int = 2
    num_items: int = 8
    batch_size: int = 1
    shard_lengths: tuple[int, ...] | None = None  # an IterableDataset with these shards
    prefetch_factor: int = 2
    in_order: bool = True
    persistent_workers: bool = False
    pin_memory: bool = False
    epochs: int = 1
    timeout: float = 0.0
    # > 0: each item is a float64 tensor this wide (faultinject's Wide), e.g. 8192 (64 KiB):
    # batches that big take a loader's shared-memory path (the reference's arena slots)
    item_floats: int = 0
    faults: tuple[Any, ...] = ()
    drop_at: tuple[int, int] | None = None
    kill_parent_at: tuple[int, int] | None = None
    in_thread: bool = False  # drive the loader from a thread other than the main one
    note: str = ""  # where the schedule came from (a spec path, a Hypothesis draw)

    @property
    def iterable(self) -> bool:
        return self.shard_lengths is not None


@dataclass
class Replay:
    """One played schedule: the driver's run (events, the sandbox's report) and its traces."""

    schedule: Schedule
    run: Run
    trace_dir: Path | None

    @property
    def outcome(self) -> str:
        """The sandbox's: returned | raised | deadline | killed."""
        return "returned" if self.run.report is None else self.run.report.outcome

    @property
    def error(self) -> str | None:
        return self.run.refused if self.run.report is None else self.run.report.error

    @property
    def clean(self) -> bool:
        """The sandbox found nothing left behind."""
        return self.run.report is None or self.run.report.clean

    @property
    def leftovers(self) -> str:
        return "" if self.run.report is None else self.run.report.leftovers()


def _trace_on(trace_dir: str | None, force_pin: bool) -> None:
    """A plan's setup, in the sandbox child: a pin thread even without an accelerator
    (docs/contracts.md), and the reference loader's trace records into `trace_dir`."""
    if force_pin:
        os.environ[FORCE_PIN_THREAD_ENV] = "1"
    if trace_dir is None:
        return
    os.environ[TRACE_DIR_ENV] = trace_dir
    tracewriter.configure(trace_dir)


def _trace_off(trace_dir: str | None) -> None:
    """A plan's teardown: close our trace file (it is not a leaked descriptor)."""
    if trace_dir is not None:
        tracewriter.configure(None)


def plan_of(schedule: Schedule, trace_dir: Path | None = None) -> Plan:
    """The driver's plan for a schedule: the same dataset, arguments and user moves."""
    kwargs: dict[str, Any] = {
        "batch_size": schedule.batch_size,
        "num_workers": schedule.num_workers,
        "prefetch_factor": schedule.prefetch_factor,
        "persistent_workers": schedule.persistent_workers,
        "pin_memory": schedule.pin_memory,
        "timeout": schedule.timeout,
    }
    if not schedule.in_order:
        kwargs["in_order"] = False
    if any(type(f).__name__ in _PASS_THROUGH_COLLATE for f in schedule.faults):
        from loaderspec.faultinject import collate

        kwargs["collate_fn"] = collate()  # the put or the read fails, not collate
    leave: dict[int, Leave] = {}
    if schedule.drop_at is not None:
        epoch, n = schedule.drop_at
        leave[epoch] = Leave("drop", n, counting="calls")
    if schedule.kill_parent_at is not None:
        epoch, n = schedule.kill_parent_at
        leave[epoch] = Leave("kill_parent", n, counting="calls")
    traced = None if trace_dir is None else str(trace_dir)
    return Plan(
        n=schedule.num_items,
        shards=schedule.shard_lengths,
        item=Wide(schedule.item_floats) if schedule.item_floats else None,
        faults=tuple(schedule.faults),
        kwargs=kwargs,
        epochs=schedule.epochs,
        leave=leave,
        max_errors=_MAX_ERRORS,
        stop_at_fatal=True,
        in_thread=schedule.in_thread,
        setup=functools.partial(_trace_on, traced, schedule.pin_memory),
        teardown=functools.partial(_trace_off, traced),
    )


def play(
    schedule: Schedule,
    loader: str | type = REFERENCE,
    *,
    trace_dir: Path | None = None,
    deadline_s: float = 30.0,
) -> Replay:
    """Play ``schedule`` against a loader class (or its ``"pkg.mod:Class"``) in a sandbox.

    Raises:
        faultinject.loaders.LoaderRefError: a name that does not import, or a local class.
    """
    cls = loaders.resolve(loader) if isinstance(loader, str) else loader
    loaders.ref_of(cls)  # a local class cannot be played in a sandbox: say so here
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
    grace = MUST_BOUND_S if schedule.kill_parent_at is not None else 2.0
    played = run(cls, plan_of(schedule, trace_dir), deadline_s=deadline_s, orphan_grace_s=grace)
    return Replay(schedule, played, trace_dir)
