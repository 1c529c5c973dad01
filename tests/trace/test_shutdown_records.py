"""The NOTE's shutdown is read off the records (issue 23): trace-check holds every run of the
reference to ``NoDispatchAfterEnd``, ``NoFetchAfterDone``, ``ShutdownOrder``,
``JoinAfterSentinels`` and ``FatalErrorShutsDown`` (``tracecheck.TRACE_INVARIANTS``), and rejects
a run broken the way a loader breaks each, at the record that shows it.

Two correct runs are traced and accepted: one broken off with the pin thread on and a slow item
in worker 0 (so a task of its is still queued when the workers are told), one failed by a worker
death. Each broken copy changes one record as a loader with that bug would log it: the trace spec
takes only spec steps, so the step that breaks the property is the first one it cannot take
(NOT-A-BEHAVIOUR there); a broken step the guards let through would make the invariant fail
(VIOLATES). Two TLC calls (the runs' two sets of constants).
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest
from loaderspec.faultinject.datasets import FaultyDataset
from loaderspec.faultinject.faults import Die, Sleep
from loaderspec.reference import DataLoader

from loaderspec import tracecheck, tracewriter
from loaderspec.traces import IteratorTrace, Record
from loaderspec.vocabulary import FORCE_PIN_THREAD_ENV, PROPERTIES, Check, PropertyName

SLOW_S = 5.0  # worker 0's item 2: far longer than the two batches before the drop take


def _traced(directory: Path, dataset: Any, calls: int, **kwargs: Any) -> IteratorTrace:
    """One iterator over ``dataset``: ``calls`` next() calls (a RuntimeError ends them), then
    dropped. Returns its run."""
    with tracewriter.trace_to(directory):
        it = iter(DataLoader(dataset, batch_size=1, num_workers=2, prefetch_factor=2, **kwargs))
        try:
            for _ in range(calls):
                next(it)
        except RuntimeError:
            pass
        del it
        gc.collect()
    (run,) = tracecheck.runs_of([directory])
    return run


def _at(run: IteratorTrace, action: str) -> int:
    return next(i for i, r in enumerate(run.records) if r.action == action)


def _edited(run: IteratorTrace, name: str, records: list[Record]) -> IteratorTrace:
    return dataclasses.replace(run, name=name, records=tuple(records))


def _moved(run: IteratorTrace, name: str, action: str, before: str) -> tuple[IteratorTrace, int]:
    """``run`` with its first ``action`` record moved just before its first ``before`` one."""
    records = list(run.records)
    record = records.pop(_at(run, action))
    at = next(i for i, r in enumerate(records) if r.action == before)
    records.insert(at, record)
    return _edited(run, name, records), at


def _inserted(run: IteratorTrace, name: str, after: str, record: Record) -> tuple[Any, int]:
    """``run`` with ``record`` just after its first ``after`` record (and timed there)."""
    records = list(run.records)
    at = _at(run, after) + 1
    records.insert(at, dataclasses.replace(record, t=records[at - 1].t + 1))
    return _edited(run, name, records), at


def _broken(dropped: IteratorTrace, died: IteratorTrace) -> dict[str, tuple[Any, str, int]]:
    """name -> (a broken copy of a correct run, the property it breaks, the index of the record
    that shows it)."""
    drop = dropped.records[_at(dropped, "MainDropIterator")]
    assert drop.state is not None
    # Worker 0's first task it never logged a fetch of: still queued when the workers are told
    # (its item is slow), the premise of the fetch-after-done copy.
    sent = [r.task for r in dropped.records if r.action == "MainTryPutIndex" and r.worker == 0]
    fetched = {r.task for r in dropped.records if r.action == "WorkerFetch" and r.worker == 0}
    queued = next(t for t in sent if t not in fetched)
    failure = _at(died, "MainDetectWorkerFailure")
    out: dict[str, tuple[Any, str, int]] = {
        # PrefetchAfterBreak: the iterator was dropped, and a task is sent for its epoch.
        "dispatch-after-drop": (
            *_inserted(
                dropped,
                "dispatch-after-drop",
                "MainDropIterator",
                dataclasses.replace(
                    drop,
                    action="MainTryPutIndex",
                    worker=drop.state["worker_queue_idx"],
                    task=drop.state["send_idx"],
                ),
            ),
            "NoDispatchAfterEnd",
        ),
        # WorkerIgnoresDone: a worker takes a queued index after the done event.
        "fetch-after-done": (
            *_inserted(
                dropped,
                "fetch-after-done",
                "MainSetWorkersDone",
                Record(
                    t=0,
                    pid=dropped.config["worker_pids"][0],
                    actor="Worker",
                    action="WorkerFetch",
                    epoch=0,
                    worker=0,
                    task=queued,
                    kind="data",
                    state={"iteration_end": False},
                ),
            ),
            "NoFetchAfterDone",
        ),
        # SentinelBeforeDone: a sentinel is put before workers_done_event is set.
        "sentinel-before-done": (
            *_moved(dropped, "sentinel-before-done", "MainPutSentinel", "MainSetWorkersDone"),
            "ShutdownOrder",
        ),
        # PinJoinTimesOut: pin_memory_thread.join() returns while the thread still runs.
        "pin-joined-running": (
            *_moved(dropped, "pin-joined-running", "MainJoinPinThread", "PinExit"),
            "ShutdownOrder",
        ),
        # Torch10ShutdownOrder: the workers are told before the pin thread is stopped.
        "workers-told-first": (
            *_moved(dropped, "workers-told-first", "MainSetWorkersDone", "MainSetPinDone"),
            "ShutdownOrder",
        ),
        # JoinBeforeSentinels: a worker is joined before the workers have their sentinels.
        "joined-before-sentinels": (
            *_moved(dropped, "joined-before-sentinels", "MainJoinWorker", "MainPutSentinel"),
            "JoinAfterSentinels",
        ),
        # RaiseKeepWorkers: the death is raised and the iterator failed, not shut down.
        "raise-keep-workers": (
            _edited(
                died,
                "raise-keep-workers",
                [
                    dataclasses.replace(r, state={**(r.state or {}), "shutdown": False})
                    if i == failure
                    else r
                    for i, r in enumerate(died.records)
                ],
            ),
            failure,
            "FatalErrorShutsDown",
        ),
    }
    return {name: (run, prop, index) for name, (run, index, prop) in out.items()}


@pytest.fixture(scope="module")
def checked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, Any], dict[str, tracecheck.RunVerdict]]:
    root = tmp_path_factory.mktemp("shutdown-records")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(FORCE_PIN_THREAD_ENV, "1")  # the pin thread's steps without an accelerator
        slow = FaultyDataset(12, (Sleep(at=2, seconds=SLOW_S),))
        dropped = _traced(root / "dropped", slow, 2, pin_memory=True)
    died = _traced(root / "died", FaultyDataset(8, (Die(at=3, once=True),)), 8)
    broken = _broken(dropped, died)
    runs = [dropped, died, *(b[0] for b in broken.values())]
    verdicts = tracecheck.check_runs(runs, localise=False)
    names = ["dropped", "died", *broken]
    return broken, dict(zip(names, verdicts, strict=True))


# The NOTE's shutdown, read off the history the records rebuild (issue 23): no task sent after the
# end, no fetch after the done event, the shutdown's order, fail-stop shuts down, the joins after
# the sentinels.
ISSUE_23 = {
    PropertyName.NO_DISPATCH_AFTER_END,
    PropertyName.NO_FETCH_AFTER_DONE,
    PropertyName.SHUTDOWN_ORDER,
    PropertyName.FATAL_ERROR_SHUTS_DOWN,
    PropertyName.JOIN_AFTER_SENTINELS,
}


def test_every_invariant_of_the_loader_spec_is_a_trace_invariant() -> None:
    """Read off the vocabulary, not a hand list: the hand list trace-check used to keep had
    left out FailStopAfterFatalError."""
    invariants = {p.name for p in PROPERTIES if p.check is Check.INVARIANT}
    assert PropertyName.FAIL_STOP_AFTER_FATAL_ERROR.value in invariants
    assert set(tracecheck.TRACE_INVARIANTS) == invariants


def test_the_shutdown_properties_are_trace_invariants() -> None:
    assert {p.value for p in ISSUE_23} <= set(tracecheck.TRACE_INVARIANTS)
    # A property no conformance case grades is checked on the reference's traces at least (an
    # invariant: a trace is finite, so a temporal property is TLC's on the models only).
    spec_only = {p.name for p in PROPERTIES if p.spec_only and p.check is Check.INVARIANT}
    assert spec_only <= set(tracecheck.TRACE_INVARIANTS)


@pytest.mark.slow
def test_a_dropped_and_a_failed_run_are_accepted(checked) -> None:
    broken, verdicts = checked
    assert {prop for _, prop, _ in broken.values()} == {p.value for p in ISSUE_23}
    for name in ("dropped", "died"):
        assert verdicts[name].ok, verdicts[name].explain()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "dispatch-after-drop",
        "fetch-after-done",
        "sentinel-before-done",
        "pin-joined-running",
        "workers-told-first",
        "joined-before-sentinels",
        "raise-keep-workers",
    ],
)
def test_a_broken_shutdown_is_rejected_at_its_record(checked, name) -> None:
    broken, verdicts = checked
    run, _, index = broken[name]
    verdict = verdicts[name]
    assert verdict.status == tracecheck.NOT_A_BEHAVIOUR, verdict.explain()
    assert verdict.line == index + 1, verdict.explain()
    assert verdict.record == run.records[index], verdict.explain()
