"""The one trace writer (``loaderspec.tracewriter``): record shapes, on and off, fault records,
and that its users name actions only through ``Action`` (no string spells one)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loaderspec import tracewriter
from loaderspec.vocabulary import (
    CONFIG_ACTION,
    CONFIG_FIELDS,
    OPTIONAL_FIELDS,
    RECORD_FIELDS,
    TRACE_DIR_ENV,
    TRACE_FILE,
    Action,
    RecordType,
)

ROOT = Path(__file__).resolve().parent.parent
# Every module that writes trace records, or names the actions of the records it writes.
WRITER_USERS = (
    ROOT / "reference",
    ROOT / "faultinject",
    ROOT / "loaderspec" / "tracewriter.py",
    ROOT / "loaderspec" / "replay.py",
)


def _records(directory: Path) -> list[dict]:
    path = directory / TRACE_FILE.format(pid=os.getpid())
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_record_type_has_its_fields_in_order(tmp_path):
    with tracewriter.trace_to(tmp_path):
        fields = {"epoch": 0, "worker": 1, "task": 2, "kind": "data", "state": {}}
        tracewriter.emit(Action.MAIN_GET_DATA, origin=(1, 2, 0), user="d1", **fields)
        tracewriter.emit(Action.WORKER_EXIT, epoch=0, worker=1)
        tracewriter.emit_config(dict.fromkeys(CONFIG_FIELDS, 0))
        tracewriter.emit_fault(Action.FAULT_KILL_WORKER, worker=1)
    get, exit_, config, fault = _records(tmp_path)
    assert list(get) == list(RECORD_FIELDS[RecordType.STEP])
    assert (get["actor"], get["action"], get["kind"]) == ("Main", "MainGetData", "data")
    assert get["origin"] == [1, 2, 0]
    assert list(exit_) == [f for f in RECORD_FIELDS[RecordType.STEP] if f not in OPTIONAL_FIELDS]
    assert exit_["actor"] == "Worker"  # the action's actor: the caller cannot get it wrong
    assert list(config) == list(RECORD_FIELDS[RecordType.CONFIG])
    assert config["action"] == CONFIG_ACTION
    assert list(fault) == [f for f in RECORD_FIELDS[RecordType.FAULT] if f not in OPTIONAL_FIELDS]
    assert (fault["actor"], fault["action"], fault["worker"]) == ("Fault", "FaultKillWorker", 1)
    assert get["t"] <= exit_["t"] <= config["t"] <= fault["t"]


def test_off_writes_nothing_and_on_again_appends(tmp_path):
    with tracewriter.trace_to(tmp_path):
        tracewriter.emit(Action.PIN_EXIT)
    assert not tracewriter.ENABLED
    assert TRACE_DIR_ENV not in os.environ
    tracewriter.emit(Action.PIN_EXIT)
    tracewriter.emit_config({})
    tracewriter.emit_last(Action.WORKER_WATCHDOG_EXIT)
    assert [r["action"] for r in _records(tmp_path)] == ["PinExit"]


def test_fault_records_follow_the_environment_and_keep_no_descriptor(tmp_path, monkeypatch):
    fds = set(os.listdir("/proc/self/fd"))
    tracewriter.emit_fault(Action.FAULT_HANG_WORKER, worker=None)  # no directory: nothing
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    assert not tracewriter.ENABLED  # the loader's own records stay off in this process
    tracewriter.emit_fault(Action.FAULT_HANG_WORKER, worker=None)
    assert [r["action"] for r in _records(tmp_path)] == ["FaultHangWorker"]
    assert set(os.listdir("/proc/self/fd")) == fds
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path / "missing" / "dir"))
    tracewriter.emit_fault(Action.FAULT_HANG_WORKER, worker=None)  # must not change the fault
    with pytest.raises(ValueError, match="MainTimeout is not a fault action"):
        tracewriter.emit_fault(Action.MAIN_TIMEOUT, worker=None)


def test_the_writer_imports_neither_torch_nor_the_reference():
    code = (
        "import sys, loaderspec.tracewriter;"
        " print(sorted({'torch', 'reference'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _action_literals(path: Path) -> list[str]:
    """String constants in ``path`` that spell an action or the Config header's action."""
    names = {a.value for a in Action} | {CONFIG_ACTION}
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names
    ]


def test_no_writer_user_spells_an_action_as_a_string():
    found = []
    for root in WRITER_USERS:
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            found += _action_literals(path)
    assert found == []


def test_the_literal_check_finds_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('emit("WorkerExit")\n')
    assert _action_literals(module) == ["m.py:1: 'WorkerExit'"]
