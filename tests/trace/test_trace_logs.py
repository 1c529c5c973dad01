"""Reading, merging and encoding trace logs (no TLC): loaderspec.traces and loaderspec.tlavalues."""

import json

import pytest

from loaderspec.tlavalues import NotEncodable, encode
from loaderspec.traces import (
    CONFIG_ACTION,
    TraceFormatError,
    merge,
    parse_line,
    read_file,
    read_logs,
    split_runs,
    write_log,
)


def _line(**fields):
    base = {"t": 1, "pid": 10, "actor": "Main", "action": "MainTryPutIndex"}
    base.update(fields)
    return json.dumps(base)


def test_a_record_keeps_its_fields_and_where_it_came_from():
    rec = parse_line(_line(worker=1, task=5, epoch=0, state={"send_idx": 6}), where="f:3")
    assert (rec.action, rec.worker, rec.task, rec.epoch) == ("MainTryPutIndex", 1, 5, 0)
    assert rec.state == {"send_idx": 6}
    assert rec.source == "f:3"
    assert "MainTryPutIndex(epoch=0, worker=1, task=5)" in rec.brief()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"t": 1, "pid": 1, "actor": "Main"}), "missing field 'action'"),
        (_line(action="MainTeleport"), "unknown action 'MainTeleport'"),
        (_line(worker="one"), "'worker' must be an integer"),
        (_line(t=True), "'t' must be an integer"),
        (_line(state=[1]), "'state' must be an object"),
    ],
)
def test_malformed_lines_are_named(line, message):
    with pytest.raises(TraceFormatError, match=message) as exc:
        parse_line(line, where="trace-10.jsonl:7")
    assert "trace-10.jsonl:7" in str(exc.value)


def test_a_torn_last_line_is_dropped_but_a_bad_middle_line_is_not(tmp_path):
    path = tmp_path / "trace-10.jsonl"
    path.write_text(_line(t=1) + "\n" + _line(t=2) + "\n" + '{"t": 3, "pid"')
    assert [r.t for r in read_file(path)] == [1, 2]
    path.write_text(_line(t=1) + "\n{oops\n" + _line(t=2) + "\n")
    with pytest.raises(TraceFormatError, match=r"trace-10.jsonl:2"):
        read_file(path)


def test_merge_orders_by_time_then_puts_before_gets_on_ties():
    put = parse_line(_line(t=5, pid=1, action="MainTryPutIndex"), where="a")
    get = parse_line(_line(t=5, pid=2, actor="Worker", action="WorkerFetch"), where="b")
    fault = parse_line(_line(t=5, pid=3, actor="Fault", action="FaultKillWorker"), where="c")
    early = parse_line(_line(t=4, pid=9, actor="Worker", action="WorkerExit"), where="d")
    assert [r.source for r in merge([get, put, fault, early])] == ["d", "c", "a", "b"]


def test_logs_of_several_processes_merge_and_split_at_config(tmp_path):
    main = [
        _line(t=1, action=CONFIG_ACTION, config={"num_workers": 1}),
        _line(t=2, action="MainTryPutIndex", worker=0, task=0),
        _line(t=9, action=CONFIG_ACTION, config={"num_workers": 2}),
        _line(t=10, action="MainTryPutIndex", worker=0, task=0),
    ]
    worker = [_line(t=3, pid=11, actor="Worker", action="WorkerFetch", worker=0, task=0)]
    (tmp_path / "trace-10.jsonl").write_text("\n".join(main) + "\n")
    (tmp_path / "trace-11.jsonl").write_text("\n".join(worker) + "\n")
    runs = split_runs(read_logs([tmp_path]), "d")
    assert [r.config["num_workers"] for r in runs] == [1, 2]
    assert [[x.action for x in r.records] for r in runs] == [
        ["MainTryPutIndex", "WorkerFetch"],
        ["MainTryPutIndex"],
    ]


def test_actions_before_any_config_mean_a_lost_start():
    rec = parse_line(_line(), where="x:1")
    with pytest.raises(TraceFormatError, match="before any 'Config'"):
        split_runs([rec], "d")


def test_a_workers_fault_before_the_header_naming_it_belongs_to_that_run():
    """The main process logs its header once the workers are started (it names their pids); a
    worker's worker_init_fn may log an injected error before that. The record belongs to the
    run whose header names its pid, the first or a later one."""
    config = {"num_workers": 1}
    recs = merge(
        [
            parse_line(_line(t=1, action=CONFIG_ACTION, config=config), where="h1"),
            parse_line(_line(t=2, action=CONFIG_ACTION, config={"worker_pids": [11]}), where="p1"),
            parse_line(_line(t=3, action="MainTryPutIndex", worker=0, task=0), where="m1"),
            parse_line(_line(t=4, pid=12, actor="Fault", action="FaultFetchError"), where="f2"),
            parse_line(_line(t=6, action=CONFIG_ACTION, config=config), where="h2"),
            parse_line(_line(t=7, action=CONFIG_ACTION, config={"worker_pids": [12]}), where="p2"),
            parse_line(_line(t=8, action="MainTryPutIndex", worker=0, task=0), where="m2"),
        ]
    )
    first, second = split_runs(recs, "d")
    assert [r.source for r in first.records] == ["m1"]
    assert [r.source for r in second.records] == ["f2", "m2"]
    with pytest.raises(TraceFormatError, match="before any 'Config'"):  # a pid no header names
        split_runs(
            [parse_line(_line(pid=13, actor="Fault", action="FaultFetchError"), where="x")], "d"
        )


def test_written_logs_read_back_the_same(tmp_path):
    recs = merge(
        [
            parse_line(_line(t=1, action=CONFIG_ACTION, config={"num_workers": 1}), where="a"),
            parse_line(_line(t=2, task=0, worker=0, state={"send_idx": 1}), where="b"),
            parse_line(_line(t=3, pid=11, actor="Worker", action="WorkerFetch"), where="c"),
        ]
    )
    write_log(recs, tmp_path)
    again = read_logs([tmp_path])
    assert [r.as_json() for r in again] == [r.as_json() for r in recs]


def test_values_are_spelled_as_tlc_reads_them():
    assert encode(True) == "TRUE"
    assert encode(-3) == "-3"
    assert encode('a "q"\\') == '"a \\"q\\"\\\\"'
    assert encode([1, [True]]) == "<<1, <<TRUE>>>>"
    assert encode({"a": 1, "b": None}) == "[a |-> 1]"
    expected = "(2 :> <<0, TRUE>> @@ 5 :> <<1, FALSE>>)"
    assert encode({"5": [1, False], "2": [0, True]}) == expected
    assert encode({}) == "<<>>"
    with pytest.raises(NotEncodable):
        encode(1.5)
    with pytest.raises(NotEncodable):
        encode({"a": 1, "2": 2})


def test_adjacent_headers_are_one_iterator_and_worker_ids_come_from_worker_pids():
    recs = merge(
        [
            parse_line(_line(t=1, action=CONFIG_ACTION, config={"num_workers": 2}), where="a"),
            parse_line(
                _line(t=2, action=CONFIG_ACTION, config={"worker_pids": [11, 12]}), where="b"
            ),
            parse_line(_line(t=3, pid=12, actor="Worker", action="WorkerWatchdogExit"), where="c"),
        ]
    )
    (run,) = split_runs(recs, "d")
    assert run.config == {"num_workers": 2, "worker_pids": [11, 12]}
    assert [r.worker for r in run.records] == [1]


def test_a_resume_logged_per_worker_is_one_step():
    recs = [
        parse_line(_line(t=1, action=CONFIG_ACTION, config={}), where="a"),
        parse_line(_line(t=2, action="MainResumeIteration", epoch=1, worker=0), where="b"),
        parse_line(_line(t=3, pid=11, actor="Worker", action="WorkerAckResume"), where="c"),
        parse_line(_line(t=4, action="MainResumeIteration", epoch=1, worker=1), where="d"),
        parse_line(_line(t=5, action="MainDrainResume", epoch=1), where="e"),
    ]
    (run,) = split_runs(merge(recs), "d")
    assert [r.source for r in run.records] == ["b", "c", "e"]


def test_trace_check_says_why_it_cannot_read_a_log(tmp_path):
    from loaderspec.cli import main

    assert main(["trace-check", str(tmp_path / "missing")]) == 2
    (tmp_path / "trace-1.jsonl").write_text('{"t": 1}\n')
    assert main(["trace-check", str(tmp_path)]) == 2


def _config_line(**config):
    return _line(action=CONFIG_ACTION, config=config)


def _full_config():
    return {"num_workers": 1, "prefetch_factor": 1, "in_order": True, "num_tasks": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no trace record to check"),
        ('{"t": 1, "pid": 10, "act', "no trace record to check"),  # its only line is torn
        ("\x00garbage\n", "not JSON"),
        (_config_line(**_full_config()) + "\n{oops\n" + _line(t=3) + "\n", "not JSON"),
        (_config_line(num_workers=1) + "\n" + _line(t=2, state=None) + "\n", "lacks"),
        (_config_line(prefetch_factor=1) + "\n", "'num_workers' must be an integer"),
        (_line(action=CONFIG_ACTION, config=[1]) + "\n", "'config' must be an object"),
        (_line(actor="Worker") + "\n", "cannot take MainTryPutIndex"),
    ],
    ids=[
        "empty",
        "torn-only-line",
        "garbage",
        "garbage-middle",
        "missing-fields",
        "config-fields",
        "config-shape",
        "wrong-actor",
    ],
)
def test_bad_input_is_one_clear_error_with_exit_code_2(tmp_path, capsys, text, message):
    from loaderspec.cli import main

    (tmp_path / "trace-10.jsonl").write_text(text)
    assert main(["trace-check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1  # one line
    assert "Traceback" not in err


def test_a_binary_file_is_bad_input(tmp_path, capsys):
    from loaderspec.cli import main

    (tmp_path / "trace-10.jsonl").write_bytes(b"\xff\xfe\x00")
    assert main(["trace-check", str(tmp_path)]) == 2
    assert "not a text file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ("<<>>", {}),  # empty: a sequence to TLC
        (  # domain 1 .. 2 (rcvd_idx = 1): TLC prints the function as a sequence
            '<<[worker |-> 0, data |-> [kind |-> "none", idx |-> -1, worker |-> 0, epoch |-> 0]],'
            ' [worker |-> 1, data |-> [kind |-> "data", idx |-> 2, worker |-> 1, epoch |-> 0]]>>',
            {"1": [0, False], "2": [1, True]},
        ),
        (  # any other domain: a function
            '(0 :> [worker |-> 1, data |-> [kind |-> "data", idx |-> 0, worker |-> 1,'
            ' epoch |-> 0]] @@ 3 :> [worker |-> 0, data |-> [kind |-> "none", idx |-> -1,'
            " worker |-> 0, epoch |-> 0]])",
            {"0": [1, True], "3": [0, False]},
        ),
    ],
    ids=["empty", "sequence", "function"],
)
def test_the_explainer_reads_task_info_in_every_shape_tlc_prints(printed, expected):
    from loaderspec.tracecheck import _as_logged

    assert _as_logged("task_info", printed) == expected


def test_as_function_maps_a_sequence_from_one():
    from loaderspec.tlavalues import NotParsable, as_function, parse

    assert as_function(parse("<<TRUE, FALSE>>")) == {1: True, 2: False}
    assert as_function(parse("(0 :> 5)")) == {0: 5}
    with pytest.raises(NotParsable):
        as_function(parse("3"))


def test_a_kill_by_pid_is_the_worker_of_that_pid():
    recs = [
        parse_line(_line(t=1, action=CONFIG_ACTION, config={"worker_pids": [11, 12]}), where="a"),
        parse_line(
            _line(t=2, pid=99, actor="Fault", action="FaultKillWorker", victim=12), where="b"
        ),
    ]
    (run,) = split_runs(merge(recs), "d")
    assert [r.worker for r in run.records] == [1]
