"""The example runs the site draws as sequence diagrams, recorded fresh at every build.

Each ``Example`` is a ``loaderspec.replay.Schedule`` played against the reference loader with
tracing on (``loaderspec.replay.play``, in a ``faultinject`` sandbox), read back with
``loaderspec.traces``, and the spec actions its recording must show to tell its story. Some
stories depend on timing (a worker still inside its hung fetch when the user breaks off); a
recording that misses an action it must show is recorded again, a few times, and then the build
fails rather than draw a diagram that shows something else. Recording all of them takes a few
seconds (one torch import, about 0.1 s per run, and the stuck worker's timeout).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderspec.faultinject.faults import Die, Hang, Sleep
from loaderspec.replay import TIMEOUT_S, Schedule, play
from loaderspec.traces import IteratorTrace, read_logs, split_runs

ATTEMPTS = 3


def _schedule(slug: str, **fields: Any) -> Schedule:
    """2 workers, prefetch 1, and the example's own fields."""
    return Schedule(**{"name": f"docs/{slug}", "num_workers": 2, "prefetch_factor": 1, **fields})


@dataclass(frozen=True)
class Example:
    """A run worth a sequence diagram."""

    slug: str  # the diagram's file name, and the directive's argument
    title: str
    shows: frozenset[str]  # the actions its recording must contain
    schedule: Schedule


EXAMPLES: tuple[Example, ...] = (
    Example(
        "normal-epoch",
        "A normal epoch: 2 workers, 4 tasks, prefetch 1",
        frozenset({"MainTryPutIndex", "MainProcessData", "MainStopIteration", "WorkerExit"}),
        _schedule("normal-epoch", num_items=4),
    ),
    Example(
        "out-of-order",
        "An out-of-order epoch (in_order=False): worker 0 is slow on task 0",
        frozenset({"MainProcessData", "MainSkipExhausted"}),
        # 0.3 s: longer than worker 1 takes to start on a loaded machine, so its results come
        # first (a skipped slot is the trace's proof that one was handed out of order).
        _schedule(
            "out-of-order",
            num_items=4,
            in_order=False,
            faults=(Sleep(at=0, seconds=0.3, once=True),),
        ),
    ),
    Example(
        "worker-death",
        "A worker death: worker 0 is killed at task 2, fail-stop",
        frozenset({"FaultKillWorker", "MainDetectWorkerFailure", "MainSetWorkersDone"}),
        _schedule(
            "worker-death", num_items=4, faults=(Die(at=2, point="before_fetch", once=True),)
        ),
    ),
    Example(
        "parent-death",
        "A parent death: the loader's process is killed after one batch",
        frozenset({"FaultKillParent", "WorkerWatchdogExit"}),
        # Driven from a thread other than the one that forked, the workers learn of the death
        # from their watchdog, which logs its exit (PR_SET_PDEATHSIG's SIGKILL cannot log).
        _schedule("parent-death", num_items=4, kill_parent_at=(0, 1), in_thread=True),
    ),
    Example(
        "stuck-worker",
        "Shutdown with a stuck worker: worker 0 hangs in its first fetch, next() times out",
        frozenset({"MainTimeout", "MainTerminateWorker"}),
        # The user's only bound on a hung fetch is `timeout`; the fail-stop shutdown that follows
        # joins for a bounded time and terminates the worker. (Breaking off instead races the
        # hung worker's start: it may see the done event before it reaches its fetch.)
        _schedule(
            "stuck-worker",
            num_items=4,
            timeout=TIMEOUT_S,
            faults=(Hang(at=0, seconds=30.0, once=True),),
        ),
    ),
    Example(
        "persistent-reset",
        "A persistent reset: two epochs on the same workers",
        frozenset({"MainResumeIteration", "WorkerAckResume", "MainDrainResume"}),
        _schedule("persistent-reset", num_items=2, persistent_workers=True, epochs=2),
    ),
    Example(
        "iterable-dry",
        "An iterable worker running dry: shards of 1 and 3 items",
        frozenset({"MainMarkWorkerUnavailable", "MainSkipExhausted", "MainStopIteration"}),
        _schedule("iterable-dry", shard_lengths=(1, 3)),
    ),
    Example(
        "pin-memory",
        "An epoch through the pin-memory thread, and its shutdown order",
        frozenset({"PinGetResult", "PinPutData", "MainSetPinDone", "MainJoinPinThread"}),
        _schedule("pin-memory", num_items=4, pin_memory=True),
    ),
)
BY_SLUG = {e.slug: e for e in EXAMPLES}


def record(example: Example) -> IteratorTrace:
    """Play the example against the reference loader and return its one traced run.

    Raises:
        RuntimeError: after ``ATTEMPTS`` recordings, none showed every action in ``shows``
            (the message names the missing ones and what the last recording did).
    """
    last = ""
    with tempfile.TemporaryDirectory(prefix=f"loaderspec-docs-{example.slug}-") as tmp:
        for attempt in range(ATTEMPTS):
            trace_dir = Path(tmp) / f"attempt{attempt}"
            replay = play(example.schedule, trace_dir=trace_dir)
            runs = split_runs(read_logs([trace_dir]), example.slug)
            missing = set(example.shows)
            if len(runs) == 1:
                missing -= {r.action for r in runs[0].records}
                if not missing:
                    return runs[0]
            last = f"{replay.outcome}, {len(runs)} runs, missing {sorted(missing)}"
    raise RuntimeError(
        f"docs example {example.slug!r}: {ATTEMPTS} recordings of the reference loader did not"
        f" show what its diagram is about (last: {last}); see loaderspec/docsite/examples.py"
    )


def handed_out(run: IteratorTrace) -> list[int]:
    """The tasks handed out, in the order the user got them."""
    return [r.task for r in run.records if r.action == "MainProcessData" and r.task is not None]
