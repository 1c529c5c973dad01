"""Sequence diagrams from trace records: one row per record, an arrow for each action that
sends to another actor, a box for every other step, a cross where a lifeline is killed."""

from __future__ import annotations

import re

from loaderspec.docsite import sequence
from loaderspec.traces import IteratorTrace, Record
from loaderspec.vocabulary import Action


def _run(*records: tuple, pin_memory: bool = False) -> IteratorTrace:
    recs = tuple(
        Record(t=i * 1_000_000, pid=1, actor=actor, action=action, worker=worker, task=task)
        for i, (actor, action, worker, task) in enumerate(records)
    )
    return IteratorTrace("test", {"num_workers": 2, "pin_memory": pin_memory}, recs)


def test_every_action_is_drawn_as_a_send_or_a_step():
    assert set(sequence.SENDS_TO) == set(Action)


def test_rows_arrows_and_boxes():
    run = _run(
        ("Main", "MainTryPutIndex", 1, 0),
        ("Worker", "WorkerFetch", 1, 0),
        ("Worker", "WorkerPut", 1, 0),
        ("Main", "MainGetData", 1, 0),
        ("Fault", "FaultKillWorker", 0, None),
        ("Main", "MainDetectWorkerFailure", 0, None),
    )
    rows = sequence.rows_of(run)
    assert [(r.source, r.target) for r in rows] == [
        ("Main", "Worker 1"),
        ("Worker 1", "Worker 1"),
        ("Worker 1", "Main"),
        ("Main", "Main"),
        ("Fault", "Worker 0"),
        ("Main", "Main"),
    ]
    assert [r.text for r in rows][:4] == [
        "MainTryPutIndex #0",
        "WorkerFetch #0",
        "WorkerPut #0",
        "MainGetData #0 (w1)",
    ]
    assert sequence.lanes_of(run, rows) == ["Main", "Worker 0", "Worker 1", "Fault"]
    svg = sequence.render(run, "a death")
    assert svg.count("marker-end=") == 3  # the three sends
    assert len(re.findall(r"<rect [^>]*rx=\"3\"", svg)) == 3  # the three steps
    assert len(re.findall(r'<path d="[^"]+" stroke=', svg)) == 1  # Worker 0's cross


def test_results_go_through_the_pin_thread_when_there_is_one():
    run = _run(("Worker", "WorkerPut", 0, 3), ("Pin", "PinPutData", 0, 3), pin_memory=True)
    assert [(r.source, r.target) for r in sequence.rows_of(run)] == [
        ("Worker 0", "Pin"),
        ("Pin", "Main"),
    ]
