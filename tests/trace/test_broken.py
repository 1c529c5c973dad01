"""Traces that are not behaviours of the spec are rejected, at the right record, for the right
reason: deliberately broken loaders (tests/trace/trace_broken_loaders.py) and hand-mutated
traces of a correct run. Each check names the first record TLC could not take and what it is.

All runs share a few spec constants and are checked in one ``check_runs`` call (two TLC calls:
the persistent-workers case has its own constants), to stay inside the CI budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from loaderspec.faultinject.faults import SkewWorker, Sleep

from loaderspec import tracecheck
from loaderspec.replay import Schedule, play
from loaderspec.traces import IteratorTrace, Record

BROKEN = "trace_broken_loaders:"
# 2 workers, prefetch 1, 6 tasks, in order: one set of constants for all but StaleEpoch.
BASE = {"num_items": 6, "prefetch_factor": 1}

# loader -> schedule, the action of the first record the spec does not allow (None: see the
# check), and a check on that record.
CASES: dict[str, tuple[Schedule, str | None, Callable[[Record], bool]]] = {
    "PastPrefetch": (
        Schedule("past-prefetch", **BASE),
        "MainTryPutIndex",
        lambda r: r.task == 2,  # 2 workers x prefetch 1: the third put is one too many
    ),
    "Reorder": (
        Schedule("reorder", faults=(SkewWorker(worker_id=0, seconds=0.3),), **BASE),
        "MainProcessData",
        lambda r: r.task == 1,  # task 1 handed out while task 0 (slow worker 0) is pending
    ),
    "Duplicate": (
        Schedule("duplicate", **BASE),
        "MainProcessData",
        lambda r: r.task == 0,  # task 0 handed out a second time
    ),
    "SkipSentinel": (
        Schedule("skip-sentinel", **BASE),
        None,  # joined or terminated before every sentinel went out
        lambda r: r.action in ("MainJoinWorker", "MainTerminateWorker"),
    ),
    "StaleEpoch": (
        Schedule("stale-epoch", num_items=6, persistent_workers=True, epochs=2, drop_at=(0, 1)),
        "MainResumeIteration",
        # the full post-state shows it: iter_state "running" at once, no resume acks awaited
        lambda r: r.epoch == 1 and r.state["iter_state"] == "running",
    ),
    # Broken shells: the core decides right, the effect differs (records written at the effect).
    "WrongPayload": (
        Schedule("wrong-payload", **BASE),
        "MainProcessData",
        lambda r: r.task == 1 and r.origin == (0, 0, 0),  # task 1 handed out task 0's batch
    ),
    "LostSentinel": (
        Schedule("lost-sentinel", **BASE),
        None,  # the first shutdown record after the lost write: a join or a terminate
        lambda r: (
            r.action in ("MainJoinWorker", "MainTerminateWorker")
            and r.state["sentinel_sent"] == [True, True]
        ),  # the core decided both
    ),
    "EarlyJoin": (
        # worker 1 sleeps in item 1 when the user breaks off after batch 0: alive at its join
        Schedule("early-join", faults=(Sleep(at=1, seconds=1.0),), drop_at=(0, 1), **BASE),
        "MainJoinWorker",
        lambda r: r.worker in (0, 1),  # worker 0's join, if it had not exited yet, else 1's
    ),
    "StalePut": (
        Schedule("stale-put", num_items=6, persistent_workers=True, epochs=2),
        "WorkerPut",
        lambda r: r.epoch == 1 and r.origin is not None and r.origin[2] == 0,  # epoch 0's batch
    ),
}


def _with(run: IteratorTrace, records: list[Record], name: str) -> IteratorTrace:
    return dataclasses.replace(run, name=name, records=tuple(records))


def _index(run: IteratorTrace, action: str, nth: int = 0) -> int:
    return [i for i, r in enumerate(run.records) if r.action == action][nth]


def _mutations(run: IteratorTrace) -> dict[str, tuple[IteratorTrace, str, str | None]]:
    """name -> (mutated run, expected status, expected action of the first bad record)."""
    recs = list(run.records)
    out: dict[str, tuple[IteratorTrace, str, str | None]] = {}
    # The log lost its last events: every record is a step, but the run never ended.
    out["truncated"] = (_with(run, recs[:-2], "truncated"), tracecheck.INCOMPLETE, None)
    # Two hand-outs swapped: task 1 before task 0 with in_order=True.
    a, b = _index(run, "MainProcessData", 0), _index(run, "MainProcessData", 1)
    swapped = list(recs)
    swapped[a], swapped[b] = recs[b], recs[a]
    out["swapped"] = (_with(run, swapped, "swapped"), tracecheck.NOT_A_BEHAVIOUR, "MainProcessData")
    # A hand-out logged twice.
    dup = [*recs[: a + 1], recs[a], *recs[a + 1 :]]
    out["duplicated"] = (
        _with(run, dup, "duplicated"),
        tracecheck.NOT_A_BEHAVIOUR,
        "MainProcessData",
    )
    # A sentinel that was never sent: its worker cannot exit, nor be joined.
    s = _index(run, "MainPutSentinel", 0)
    out["no-sentinel"] = (
        _with(run, recs[:s] + recs[s + 1 :], "no-sentinel"),
        tracecheck.NOT_A_BEHAVIOUR,
        None,
    )
    # A post-state that is not the spec's: send_idx off after the first put.
    p = _index(run, "MainTryPutIndex", 0)
    bad_state = dict(recs[p].state or {}, send_idx=5)
    wrong = [*recs[:p], dataclasses.replace(recs[p], state=bad_state), *recs[p + 1 :]]
    out["wrong-state"] = (_with(run, wrong, "wrong-state"), tracecheck.NOT_A_BEHAVIOUR, None)
    # A kill that raced the worker's own exit (it logged WorkerExit, the join timed out while
    # it tore down): a stuttering step, accepted. The same kill after the join is not.
    j = _index(run, "MainJoinWorker", 0)
    kill = dataclasses.replace(recs[j], action="MainTerminateWorker")
    raced = [*recs[:j], kill, *recs[j:]]
    out["kill-races-exit"] = (_with(run, raced, "kill-races-exit"), tracecheck.ACCEPTED, None)
    late = [*recs[: j + 1], kill, *recs[j + 1 :]]
    out["kill-after-join"] = (
        _with(run, late, "kill-after-join"),
        tracecheck.NOT_A_BEHAVIOUR,
        "MainTerminateWorker",
    )
    return out


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Play every broken loader and one correct run; check them and the mutations together."""
    root = tmp_path_factory.mktemp("broken")
    runs: dict[str, IteratorTrace] = {}
    for loader, (schedule, _, _) in CASES.items():
        replay = play(schedule, BROKEN + loader, trace_dir=root / loader, deadline_s=60)
        assert replay.outcome != "deadline", f"{loader}: {replay.error}"
        (runs[loader],) = tracecheck.runs_of([root / loader])
    play(Schedule("good", **BASE), trace_dir=root / "good", deadline_s=60)
    (good,) = tracecheck.runs_of([root / "good"])
    runs["good"] = good
    mutations = _mutations(good)
    runs.update({name: m[0] for name, m in mutations.items()})
    verdicts = tracecheck.check_runs(list(runs.values()), localise=False)
    return good, mutations, dict(zip(runs, verdicts, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("loader", list(CASES))
def test_a_broken_loader_is_rejected_where_it_breaks(checked, loader):
    _, action, check = CASES[loader]
    verdict = checked[2][loader]
    assert verdict.status == tracecheck.NOT_A_BEHAVIOUR, verdict.explain()
    record = verdict.record
    assert record is not None, verdict.explain()
    if action is not None:
        assert record.action == action, verdict.explain()
    assert check(record), verdict.explain()


@pytest.mark.slow
def test_the_correct_run_is_accepted(checked):
    assert checked[2]["good"].ok, checked[2]["good"].explain()


@pytest.mark.slow
def test_mutated_traces_are_rejected_for_the_right_reason(checked):
    good, mutations, verdicts = checked
    for name, (_, status, action) in mutations.items():
        verdict = verdicts[name]
        assert verdict.status == status, f"{name}: {verdict.explain()}"
        if action is not None:
            assert verdict.record is not None, name
            assert verdict.record.action == action, name
    # Where each one breaks, and why.
    assert verdicts["swapped"].record.task == 1
    assert verdicts["duplicated"].line == _index(good, "MainProcessData", 0) + 2
    # the worker exits on a sentinel never sent, or the next sentinel's logged sentinel_sent
    # counts the missing one, whichever comes first
    no_sentinel = verdicts["no-sentinel"].record
    assert no_sentinel.action in ("WorkerExit", "MainPutSentinel", "MainJoinWorker")
    wrong = tracecheck.localise(verdicts["wrong-state"])
    assert wrong.line == _index(good, "MainTryPutIndex", 0) + 1
    assert wrong.enabled is True  # the action was possible; its logged post-state was not
    assert "send_idx: logged 5, spec 1" in wrong.explain()
    assert "send_idx = 0" in wrong.explain()  # the spec state before the record


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strip", "named"),
    [
        (lambda r: dataclasses.replace(r, state=None) if r.actor == "Main" else r, "lacks state"),
        (
            lambda r: (
                dataclasses.replace(r, state={k: v for k, v in r.state.items() if k != "in_call"})
                if r.actor == "Main"
                else r
            ),
            "lacks state.in_call",
        ),
        (
            lambda r: (
                dataclasses.replace(r, task=None, worker=None)
                if r.action == "MainTryPutIndex"
                else r
            ),
            "lacks worker, task",
        ),
        (
            lambda r: dataclasses.replace(r, kind=None) if r.action == "WorkerPut" else r,
            "lacks kind",
        ),
    ],
    ids=["state", "a-state-field", "parameters", "kind"],
)
def test_a_stripped_trace_is_rejected_naming_what_is_missing(checked, strip, named):
    good = checked[0]
    stripped = _with(good, [strip(r) for r in good.records], "stripped")
    with pytest.raises(tracecheck.TraceFormatError, match=named):
        tracecheck.check_runs([stripped])


# The kill-races-exit stutter of the trace spec, and a broken one that is no step of the spec:
# it turns an exited worker into a killed one.
_RACE_STUTTER = "           /\\ MainStep(UNCHANGED vars)"
_RACE_NON_STEP = (
    '           /\\ MainStep(worker_state\' = [worker_state EXCEPT ![w] = "killed"]'
    " /\\ UNCHANGED <<main_vars, queue_vars, worker_msg, iteration_end, pin_state, pin_msg,"
    " history_vars, observed>>)"
)


@pytest.mark.slow
def test_the_refinement_property_fails_on_a_trace_step_that_is_no_spec_step(checked, tmp_path):
    """SpecStep ([][Next]_vars, a PROPERTY of every trace model) can fail: a trace spec whose
    stuttering record changes a variable in a way no spec action does is caught by TLC."""
    from loaderspec import tlc
    from loaderspec.tracecompile import write_model

    raced = checked[1]["kill-races-exit"][0]
    tla, cfg = write_model(tmp_path, "Raced", [raced], tracecheck.checkable_constants(raced))
    text = tla.read_text()
    assert text.count(_RACE_STUTTER) == 1
    tla.write_text(text.replace(_RACE_STUTTER, _RACE_NON_STEP))
    result = tlc.run_tlc(
        tla,
        cfg,
        workdir=tmp_path,
        extra_args=("-deadlock",),
        timeout_s=120,
        jvm_args=tlc.FAST_START,
    )
    assert result.violated == "SpecStep", result.output[-2000:]


@pytest.mark.slow
def test_a_traced_suite_run_reports_each_rejected_case(checked, tmp_path):
    """``--conformance-trace``'s end-of-run check (loaderspec.suitetrace.validate): every case
    folder's runs, one verdict each, a rejection named by its case."""
    from loaderspec import suitetrace
    from loaderspec.traces import read_logs, write_log

    good, mutations, _ = checked
    header = [r for r in read_logs([good.name]) if r.action == "Config"]
    write_log([*header, *good.records], tmp_path / "case_good")
    write_log([*header, *mutations["wrong-state"][0].records], tmp_path / "case_wrong")
    (tmp_path / "case_untraced").mkdir()  # a case whose loader wrote nothing
    summary = suitetrace.validate(tmp_path)
    assert (summary["runs"], summary["accepted"], summary["cases"]) == (2, 1, 2)
    assert [r["case"] for r in summary["rejected"]] == ["case_wrong"]
    assert "send_idx: logged 5, spec 1" in summary["rejected"][0]["why"]
    assert (tmp_path / suitetrace.RESULT_FILE).exists()
