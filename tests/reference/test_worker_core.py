"""The worker's pure protocol core, driven alone (no process, no pipe): units, records, Hypothesis.

``workercore_model.SimWorker`` feeds the core a script the way ``reference/worker.py`` does, and
``workercore_model.expected`` is torch's ``_worker_loop`` written out plainly; Hypothesis draws
scripts (messages, the done event, fetch outcomes, an init error, results that do not pickle)
and the two must agree on every result sent and every fetch run.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loaderspec.reference import loop
from loaderspec.reference.messages import NO_TASK, RESUME, SENTINEL, Result, Task
from loaderspec.reference.steps import Kind, ProtocolViolation
from loaderspec.reference.worker_core import WORKER_METHOD, WorkerCore
from workercore_model import INIT_ERROR, PICKLE_ERROR, Script, SimWorker, expected

from loaderspec import tracewriter
from loaderspec.vocabulary import TRACE_FILE, Action

A = Action
REFERENCE = Path(__file__).resolve().parents[2] / "reference"


def _run(script: Script) -> SimWorker:
    sim = SimWorker(script)
    sim.run()
    return sim


def test_a_task_is_fetched_and_put():
    sim = _run(Script(((Task(0, 7), False),), ((Kind.DATA, "b"),), iterable=False))
    assert sim.steps == [(A.WORKER_FETCH, 0, Kind.DATA), (A.WORKER_PUT, 0, Kind.DATA)]
    assert sim.sent == [Result(0, Kind.DATA, "b", (0, 0, 0))]


def test_a_task_taken_after_the_done_event_is_skipped_unfetched():
    sim = _run(Script(((Task(0, 7), True),), (), iterable=False))
    assert sim.steps == [(A.WORKER_SKIP_INDEX, 0, None)]
    assert (sim.sent, sim.fetches) == ([], 0)


def test_exhaustion_skips_the_rest_of_the_epoch_until_a_resume():
    messages = ((Task(0, None), False), (Task(1, None), False), (RESUME, False))
    script = Script((*messages, (Task(2, None), False)), ((Kind.EXHAUSTED, "stop"),), True)
    sim = _run(script)
    assert [s[0] for s in sim.steps] == [
        A.WORKER_FETCH,
        A.WORKER_PUT,
        A.WORKER_SKIP_INDEX,
        A.WORKER_ACK_RESUME,
        A.WORKER_FETCH,
        A.WORKER_PUT,
    ]
    # The payload is what the IO gave: the user's state as the shard ran dry (checkpoint.py)
    assert sim.sent[0] == Result(0, Kind.EXHAUSTED, "stop", (0, 0, 0))
    assert sim.sent[1] == Result.resume_ack((0, NO_TASK, 1))
    assert sim.sent[2].origin == (0, 2, 1)  # the new epoch's fetch


def test_a_map_datasets_stop_iteration_is_an_error():
    sim = _run(Script(((Task(0, 3), False), (Task(1, 4), False)), ((Kind.EXHAUSTED, "e"),), False))
    assert [r.kind for r in sim.sent] == [Kind.ERROR, Kind.DATA]
    assert not sim.core.iteration_end


def test_the_init_error_is_the_first_tasks_result_and_the_fetcher_is_not_run():
    script = Script(((Task(0, 1), False), (Task(1, 2), False)), (), False, init_error=True)
    sim = _run(script)
    assert sim.sent[0] == Result(0, Kind.ERROR, INIT_ERROR, (0, 0, 0))
    assert sim.sent[1].kind is Kind.DATA
    assert sim.fetches == 1


def test_the_sentinel_ends_the_worker_and_nothing_is_taken_after_it():
    sim = _run(Script(((SENTINEL, False), (Task(0, 1), False)), (), False))
    assert sim.steps == [(A.WORKER_EXIT, None, None)]
    with pytest.raises(ProtocolViolation):
        sim.core.next_action(Task(0, 1), False)


def test_an_unpicklable_batch_goes_as_its_error_an_unpicklable_error_with_no_fault_step():
    script = Script(
        ((Task(0, 1), False), (Task(1, 2), False)),
        ((Kind.DATA, "b"), (Kind.ERROR, "e")),
        False,
        unpicklable=frozenset({0, 1}),
    )
    sim = _run(script)
    assert [s[0] for s in sim.steps] == [
        A.WORKER_FETCH,
        A.FAULT_PUT_ERROR,  # the spec's fault is a batch's
        A.WORKER_PUT,
        A.WORKER_FETCH,
        A.WORKER_PUT,
    ]
    assert [(r.kind, r.payload) for r in sim.sent] == [(Kind.ERROR, PICKLE_ERROR)] * 2


def test_a_fetch_is_refused_once_the_shard_ran_dry():
    core = WorkerCore(0, iterable=True)
    core.fetch(0, Kind.EXHAUSTED, "stop")
    with pytest.raises(ProtocolViolation):
        core.fetch(1, Kind.DATA, "b")
    assert core.next_action(Task(1, None), False).action is A.WORKER_SKIP_INDEX


def test_the_records_are_takes_with_the_workers_state(tmp_path):
    script = Script(((Task(0, None), False), (RESUME, False), (SENTINEL, False)), (), True)
    with tracewriter.trace_to(tmp_path):
        _run(script)
    lines = (tmp_path / TRACE_FILE.format(pid=os.getpid())).read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["action"], r["epoch"], r.get("task"), r["state"]) for r in records] == [
        ("WorkerFetch", 0, 0, {"iteration_end": False}),
        ("WorkerPut", 0, 0, {}),
        ("WorkerAckResume", 1, None, {"iteration_end": False}),
        ("WorkerExit", 1, None, {}),
    ]
    assert records[1]["origin"] == [0, 0, 0]
    assert records[1]["kind"] == "data"


def test_every_worker_action_has_a_core_method():
    assert {a for a in Action if a.actor.value == "Worker"} - set(WORKER_METHOD) == {
        A.WORKER_WATCHDOG_EXIT  # the process ends itself from another thread (emit_last)
    }
    for method in WORKER_METHOD.values():
        assert callable(getattr(WorkerCore, method))


def test_the_worker_loop_makes_no_protocol_decision():
    """``worker.py`` does not read the messages' meaning or the core's state to decide a step:
    no comparison with RESUME or SENTINEL, no ``iteration_end``, no ``Kind`` chosen by hand."""
    tree = ast.parse((REFERENCE / "worker.py").read_text())
    loop_fn = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "worker_loop"
    )
    names = {n.id for n in ast.walk(loop_fn) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(loop_fn) if isinstance(n, ast.Attribute)}
    assert not names & {"RESUME", "SENTINEL", "Result", "Kind"}
    assert not attrs & {"iteration_end", "init_error", "epoch"}
    assert "emit" not in attrs  # records come from loop.take


# ------------------------------------------------------------------- Hypothesis -------------
@st.composite
def scripts(draw: st.DrawFn) -> Script:
    iterable = draw(st.booleans())
    messages: list[tuple[object, bool]] = []
    done = False
    idx = 0
    for _ in range(draw(st.integers(0, 12))):
        done = done or draw(st.integers(0, 9)) == 0  # workers_done_event: once set, set
        pick = draw(st.integers(0, 9))
        if pick == 0:
            messages.append((RESUME, done))
        elif pick == 1:
            messages.append((SENTINEL, done))
        else:
            messages.append((Task(idx, None if iterable else idx), done))
            idx += 1
    kinds = st.sampled_from([Kind.DATA, Kind.DATA, Kind.ERROR, Kind.EXHAUSTED])
    outcomes = draw(st.lists(st.tuples(kinds, st.integers(0, 99)), max_size=12))
    return Script(
        tuple(messages),  # type: ignore[arg-type]  # (object: drawn IndexMessages)
        tuple(outcomes),
        iterable,
        init_error=draw(st.booleans()),
        unpicklable=frozenset(draw(st.sets(st.integers(0, idx), max_size=2))),
    )


@settings(max_examples=300, deadline=None)
@given(script=scripts())
def test_the_core_agrees_with_torchs_worker_loop(script):
    sim = _run(script)
    want, fetches = expected(script)
    assert sim.sent == want
    assert sim.fetches == fetches
    # The spec's worker invariants, on the steps taken: nothing after WorkerExit; every fetch is
    # followed by its put (through FaultPutError for a batch that does not pickle).
    actions = [s[0] for s in sim.steps]
    if A.WORKER_EXIT in actions:
        assert actions[-1] is A.WORKER_EXIT
        assert actions.count(A.WORKER_EXIT) == 1
    for i, (action, task, _kind) in enumerate(sim.steps):
        if action is A.WORKER_FETCH:
            after = next(s for s in sim.steps[i + 1 :] if s[0] is not A.FAULT_PUT_ERROR)
            assert after[:2] == (A.WORKER_PUT, task)
    before_exit = [m for m, _ in script.messages]
    if SENTINEL in before_exit:
        before_exit = before_exit[: before_exit.index(SENTINEL)]
    assert sim.core.epoch == before_exit.count(RESUME)


def test_loop_take_is_the_one_helper():
    """The worker's steps go through the same ``take`` as the main process's."""
    core = WorkerCore(3, iterable=False)
    result = loop.take(core, A.WORKER_FETCH, 5, Kind.DATA, "b")
    assert result == Result(5, Kind.DATA, "b")
    assert core.last == (A.WORKER_FETCH, 3, 5, Kind.DATA)
