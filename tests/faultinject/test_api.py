"""faultinject's public names are the ones docs/contracts.md promises (others build on them)."""

from __future__ import annotations

import dataclasses
import inspect

from loaderspec.faultinject import datasets, faults, limits, processes, records, sandbox

from loaderspec import faultinject


def test_all_names_resolve():
    for name in faultinject.__all__:
        assert getattr(faultinject, name) is not None, name


def test_contract_names_exist():
    for cls in ("Die", "Hang", "Sleep", "Raise", "RaiseUnrebuildable", "Unpicklable", "SkewWorker"):
        assert dataclasses.is_dataclass(getattr(faults, cls)), cls
    for cls in ("Die", "Hang", "Sleep", "Raise", "RaiseUnrebuildable", "Unpicklable"):
        fields = {f.name for f in dataclasses.fields(getattr(faults, cls))}
        assert {"at", "once"} <= fields, cls
    assert {"signal", "point"} <= {f.name for f in dataclasses.fields(faults.Die)}
    assert {"exc_type", "message"} <= {f.name for f in dataclasses.fields(faults.Raise)}
    assert {"worker_id", "seconds"} <= {f.name for f in dataclasses.fields(faults.SkewWorker)}
    ds = inspect.signature(datasets.FaultyDataset)
    assert list(ds.parameters)[:2] == ["n", "faults"]
    assert {"item", "cost_s", "record_dir"} <= set(ds.parameters)
    it = inspect.signature(datasets.FaultyIterable)
    assert list(it.parameters)[:2] == ["shard_lengths", "faults"]
    assert "record_dir" in it.parameters
    assert callable(faultinject.collate)
    assert callable(records.read_fetches)
    for fn in ("children", "new_children", "kill", "wait_gone", "zombies"):
        assert callable(getattr(processes, fn)), fn
    assert callable(limits.nofile)
    assert callable(limits.small_shm)
    assert issubclass(limits.Unsupported, Exception)
    assert callable(sandbox.run)
    assert callable(sandbox.kill_self)
    assert "deadline_s" in inspect.signature(sandbox.run).parameters
    report_fields = {f.name for f in dataclasses.fields(sandbox.SandboxReport)}
    assert {
        "outcome",
        "value",
        "error",
        "elapsed_s",
        "leftover_pids",
        "zombies",
        "orphans",
        "leaked_shm",
        "leaked_fds",
        "leaked_threads",
        "killed_by_signal",
        "orphan_exit_s",
    } <= report_fields
    fetch_fields = {f.name for f in dataclasses.fields(records.Fetch)}
    assert {"t", "pid", "worker_id", "index", "epoch_hint"} <= fetch_fields
