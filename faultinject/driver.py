"""The harness side: play any plan against any loader in a sandbox, and say what the user saw.

`run(loader, plan)` plays the plan in a `faultinject.sandbox` child (a `Plan`: one loader,
`faultinject._play.drive`; a `RankPlan`: a rank group, `faultinject.ranks.group`; a
`ResumePlan`: a checkpoint and resume, `faultinject.resume.drive`; each drives its loaders with
`_play`'s driver) and returns a `Run`: the sandbox's report (outcome, leaks, orphans) and the
events the child streamed (`faultinject.events`: one frozen class per kind, a rank's and a
segment's the same classes), read by class (`run.of(0, Error) -> list[Error]`; `rank=` and
`seg=` pick a rank's or a segment's). A conformance case, a spec-generated scenario and a bench
figure differ only in the plan they hand it and what they read off the `Run`; grading is not
this module's job. `workers(loader)` says what a loader's workers are (declared, or watched in
one small run).

A loader that cannot express the plan's configuration (`faultinject.loaders.unsupported`, or a
constructor raising `NotImplementedError` or rejecting one of torch's arguments) is not run: the
`Run` says `refused` and why.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from loaderspec.faultinject import _play, loaders, ranks, records, resume, sandbox
from loaderspec.faultinject._play import describe, flat
from loaderspec.faultinject.events import Batch, Call, Error, Event, GroupPort, Refused, Stop
from loaderspec.faultinject.plan import MUST_BOUND_S, Await, Leave, Plan, RankPlan, ResumePlan
from loaderspec.faultinject.sandbox import SandboxReport

__all__ = [
    "MUST_BOUND_S",
    "PROBE_DEADLINE_S",
    "Await",
    "Leave",
    "Plan",
    "RankPlan",
    "ResumePlan",
    "Run",
    "describe",
    "flat",
    "probe_workers",
    "refusal",
    "run",
    "workers",
]

E = TypeVar("E", bound=Event)
_CALLS = (Batch, Error, Stop)


@dataclass
class Run:
    """A played plan: the sandbox's report, the events the driver streamed, and the records;
    for a rank group, the port its ranks met on and whether anything still listens there."""

    plan: Plan
    report: SandboxReport | None  # None: refused before anything started
    events: list[Event] = field(default_factory=list)
    fetches: list[records.Fetch] = field(default_factory=list)
    inits: list[records.WorkerInit] = field(default_factory=list)
    refused: str | None = None
    leak_note: str = ""  # why the leak wait was not the usual one (set by whoever chose it)
    port: int | None = None
    port_listening: bool = False

    @overload
    def of(
        self, epoch: int | None = 0, *, rank: int | None = None, seg: int | None = None
    ) -> list[Event]: ...
    @overload
    def of(
        self,
        epoch: int | None,
        kind: type[E],
        *,
        rank: int | None = None,
        seg: int | None = None,
    ) -> list[E]: ...
    def of(
        self,
        epoch: int | None = 0,
        kind: type[Event] = Event,
        *,
        rank: int | None = None,
        seg: int | None = None,
    ) -> list[Any]:
        """Events of `epoch` (None: all, the loader's own included) of class `kind` (`Event`:
        all), in order; of rank `rank` and segment `seg` (None: any)."""
        return [
            e
            for e in self.events
            if epoch in (None, e.epoch)
            and isinstance(e, kind)
            and rank in (None, e.rank)
            and seg in (None, e.seg)
        ]

    def calls(self, epoch: int = 0) -> list[Call]:
        """The results of `next()` in `epoch`: `Batch`, `Error` and `Stop` events."""
        return [e for e in self.of(epoch) if isinstance(e, _CALLS)]

    def batches(self, epoch: int = 0, *, rank: int | None = None) -> list[Any]:
        return [e.value for e in self.of(epoch, Batch, rank=rank)]

    def items(self, epoch: int = 0, *, rank: int | None = None) -> list[Any]:
        return [x for b in self.batches(epoch, rank=rank) for x in b]

    def last(self, epoch: int = 0) -> str:
        """The name of the last event of `epoch` ("nothing" if none), for messages."""
        evs = self.of(epoch)
        return evs[-1].name if evs else "nothing"

    def first(self, kind: type[E], epoch: int | None = 0) -> E | None:
        found = self.of(epoch, kind)
        return found[0] if found else None


def _probe_dataset(plan: Plan) -> Any:
    """A dataset of the plan's shape (map-style or iterable, its length), without faults or
    records: what a loader's `loaderspec_unsupported` is shown before anything starts."""
    from loaderspec.faultinject.datasets import FaultyDataset, FaultyIterable

    return FaultyDataset(plan.n) if plan.shards is None else FaultyIterable(plan.shards)


def run(
    loader: type | str,
    plan: Plan,
    *,
    deadline_s: float,
    start: Literal["fork", "spawn"] = "fork",
    orphan_grace_s: float = 1.0,
    linger_s: float = MUST_BOUND_S,
    linger_by_type: Mapping[str, float] | None = None,
    first_event_s: float | None = None,
) -> Run:
    """Play `plan` against `loader` in a sandbox; never raises for anything the loader does.

    Args:
        loader: the loader class, or its `"pkg.mod:Class"` (needed with `start="spawn"`).
        plan: what the user does.
        deadline_s: the sandbox's bound on the whole scenario (`report.outcome == "deadline"`).
        start: the sandbox's start method.
        orphan_grace_s: how long workers left when the child ended may take to exit (a
            parent-death plan times their exits over it: `report.orphan_exit_s`).
        linger_s: how long the loader's processes may take to exit after the scenario ended.
        linger_by_type: `linger_s` for loaders of these types (`"module:Class"` of what the
            constructor returned: the `built` event's value).
        first_event_s: a run with no event that long ends there, as past its deadline (a
            resume's segments note no `built` event: its first event is its first step).

    Raises:
        faultinject.sandbox.SandboxError: the sandbox could not start (e.g. a local class).
    """
    cls = loaders.resolve(loader) if isinstance(loader, str) else loader
    why = refusal(cls, plan)
    if why:
        return Run(plan, None, refused=why)
    record_dir = tempfile.mkdtemp(prefix="faultinject-run-")
    # The sandbox target: the plan's player (a rank group's, a resume's, or one loader's).
    target: Callable[..., Any] = _play.drive
    args: tuple[Any, ...] = (loader if start == "spawn" else cls, plan, record_dir, linger_by_type)
    if isinstance(plan, RankPlan):
        plan = ranks.timed(cls, plan)
        target, args = ranks.group, (cls, plan)
    elif isinstance(plan, ResumePlan):
        target, args = resume.drive, (cls, plan)
    try:
        report = sandbox.run(
            target,
            *args,
            deadline_s=deadline_s,
            start=start,
            orphan_grace_s=orphan_grace_s,
            linger_s=linger_s,
            # A rank group's ranks are processes of their own: what they orphan stays counted.
            subreaper=isinstance(plan, RankPlan),
            first_note_s=first_event_s,
        )
        events = [n for n in report.notes if isinstance(n, Event)]
        out = Run(plan, report, [e for e in events if not isinstance(e, GroupPort)])
        out.refused = next((e.reason for e in events if isinstance(e, Refused)), None)
        out.port = next((e.port for e in events if isinstance(e, GroupPort)), None)
        out.port_listening = out.port is not None and ranks.listening(out.port)
        out.fetches = records.read_fetches(record_dir, faults=True, fetched=True)
        out.inits = records.read_inits(record_dir)
        return out
    finally:
        shutil.rmtree(record_dir, ignore_errors=True)


def refusal(loader: type, plan: Plan) -> str | None:
    """Why `loader` cannot play `plan` (None: it can), before anything starts: a configuration it
    declares it cannot express (`faultinject.loaders.unsupported`; the arguments the plan adds,
    a collate_fn carrying faults or a sampler, count too), or a resume without its state."""
    if isinstance(plan, RankPlan):
        return ranks.refusal(loader, plan)
    if isinstance(plan, ResumePlan):
        return resume.refusal(loader, plan)
    added = dict.fromkeys(plan.argument_names() - set(plan.kwargs))
    return loaders.unsupported(loader, {**added, **plan.kwargs}, dataset=_probe_dataset(plan))


PROBE_DEADLINE_S = 60.0  # the worker probe's one small epoch, on a loaded machine


def probe_workers(loader_cls: type, deadline_s: float = PROBE_DEADLINE_S) -> loaders.WorkerKind:
    """Watch one small epoch (4 items, `num_workers=2`) of `loader_cls` in a sandbox and say where
    its fetches ran: in other processes, in other threads of the loader's process, or in the
    thread that called `next()`. A loader that refuses the configuration, or fetches nothing
    (within `deadline_s`), is taken to have processes (torch's shape; the cases then say what
    they need)."""
    plan = Plan(n=4, records=True, kwargs={"num_workers": 2, "batch_size": 1})
    r = run(loader_cls, plan, deadline_s=deadline_s, linger_s=1.0)
    fetches = [f for f in r.fetches if f.event == "fetch"]
    if r.report is None or not fetches:
        return "processes"
    home = r.report.pid  # the loader's process; its main thread's id is its pid (Linux)
    if any(f.pid != home for f in fetches):
        return "processes"
    return "none" if all(f.tid == home for f in fetches) else "threads"


_PROBED: dict[type, loaders.WorkerKind] = {}


def workers(loader_cls: type, probe_deadline_s: float = PROBE_DEADLINE_S) -> loaders.WorkerKind:
    """What `loader_cls`'s workers are: its `loaderspec_workers` declaration, else what one small
    epoch showed (`probe_workers` with `probe_deadline_s`, once per class and process).

    Raises:
        LoaderRefError: the class declares a kind that is not one of `WORKER_KINDS`.
    """
    declared = loaders.declared_workers(loader_cls)
    if declared:
        return declared
    if loader_cls not in _PROBED:
        _PROBED[loader_cls] = probe_workers(loader_cls, probe_deadline_s)
    return _PROBED[loader_cls]
