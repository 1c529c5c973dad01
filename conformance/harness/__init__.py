"""The harness a conformance case is written with; everything a case author imports is here.

A case builds a `Plan` (faultinject's driver: a faulty dataset, the loader's arguments, the
user's moves), plays it against the loader under test with `play` (SKIP when the loader cannot
express the configuration, FAIL on a hang), and grades what the user saw with the suite's
property checks (`checks`) or its own comparisons, through the `grade` fixture (`Grade`). What
the loader's workers are (`workers`: processes, threads, none visible) decides whether a case
applies (`needs_worker_processes`) and how long a hung fetch lasts (`hang_s`).
Faults are faultinject's (`faultinject.faults`). See docs/conformance.md, "Writing a case".
"""

from __future__ import annotations

from loaderspec.conformance.harness import accelerator, checks
from loaderspec.conformance.harness.grading import (
    MUST_BOUND_S,
    SHOULD_BOUND_S,
    Grade,
    spec_property,
)
from loaderspec.conformance.harness.scenario import (
    DEADLINE_S,
    NO_WORKER_TO_KILL,
    THREAD_HANG_S,
    hang_s,
    kwargs,
    needs_worker_processes,
    play,
    shutdown_s,
    workers,
)
from loaderspec.faultinject.datasets import Tensors, Wide
from loaderspec.faultinject.driver import Await, Leave, Plan, Run
from loaderspec.faultinject.faults import (
    EVERY,
    Die,
    Hang,
    Raise,
    RaiseUnrebuildable,
    SkewWorker,
    Sleep,
    Unpicklable,
)

__all__ = [
    "DEADLINE_S",
    "EVERY",
    "MUST_BOUND_S",
    "NO_WORKER_TO_KILL",
    "SHOULD_BOUND_S",
    "THREAD_HANG_S",
    "Await",
    "Die",
    "Grade",
    "Hang",
    "Leave",
    "Plan",
    "Raise",
    "RaiseUnrebuildable",
    "Run",
    "SkewWorker",
    "Sleep",
    "Tensors",
    "Unpicklable",
    "Wide",
    "accelerator",
    "checks",
    "hang_s",
    "kwargs",
    "needs_worker_processes",
    "play",
    "shutdown_s",
    "spec_property",
    "workers",
]
