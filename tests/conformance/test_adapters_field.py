"""The field's loaders behind torch's constructor: torchdata.nodes (thread and process mappers),
SPDL and grain (and the declared limits of paddle, litdata and streaming). Each adapter's tests
skip cleanly, naming the extra, where its package is absent.

For each adapter: its batches equal torch's for plain configurations; every limit it declares is
answered by `loaderspec_unsupported` and refused by the constructor with the same line (a SKIP in
the suite, never a FAIL), and is listed in docs/conformance.md; and a fault the suite grades is
graded as what it is (the loader's own defect, seen through the conformance case).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from adapter_scenarios import (  # the fixtures are autouse: imported, they apply here
    ADAPTERS,
    busy_then_die,
    drain,
    first_batches_then_drop,
    load,
    reap_finished_workers,  # noqa: F401
    ref,
)
from conformance_runner import outcomes, run_suite
from loaderspec.faultinject import processes, sandbox
from loaderspec.faultinject.faults import Die, Raise
from torch.utils.data import DataLoader

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_child_left")]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"

# Every graded adapter behind the shared front (`conformance.adapters._front`): adapter_scenarios'
# ADAPTERS, from the one list (`loaderspec.graded`); torchdata's Loader is StatefulDataLoader
# itself, with torch's constructor and no limits (tests/conformance/test_adapters.py).
FIELD = ["nodes-thread", "nodes-process", "spdl", "grain"]


def noop_init(worker_id: int) -> None:
    """A worker_init_fn that does nothing (only its presence matters here)."""


# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize("name", FIELD)
@pytest.mark.parametrize(
    "kw",
    [
        {"batch_size": 3, "num_workers": 2},
        {"batch_size": None, "num_workers": 2},
        {"batch_size": 4, "num_workers": 0, "drop_last": True},
    ],
    ids=["batched", "unbatched", "inline"],
)
def test_batches_equal_torchs(name, kw):
    cls = load(name)
    ds = faultinject.FaultyDataset(10)
    loader = cls(ds, **kw)
    got = [torch.as_tensor(b).tolist() for b in loader]
    want = [torch.as_tensor(b).tolist() for b in DataLoader(ds, **kw)]
    assert got == want
    assert len(loader) == len(want)


@pytest.mark.parametrize("name", ["nodes-thread", "nodes-process", "grain"])
def test_a_seeded_shuffle_equals_torchs(name):
    # SPDL's front is its own (it draws no per-iterator seed from the generator, so its shuffle
    # differs from torch's); these adapters draw from `generator` in torch's order.
    cls = load(name)
    ds = faultinject.FaultyDataset(20)
    kw = {"batch_size": 4, "shuffle": True, "num_workers": 2}
    got = cls(ds, generator=torch.Generator().manual_seed(7), **kw)
    want = DataLoader(ds, generator=torch.Generator().manual_seed(7), **kw)
    for _ in range(2):  # two epochs: the generator is drawn from in the same order
        assert [b.tolist() for b in got] == [b.tolist() for b in want]


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_bad_arguments_raise_torchs_errors(name):
    cls = load(name)
    ds = faultinject.FaultyDataset(10)
    for bad in ({"num_workers": -1}, {"timeout": -1}, {"shuffle": True, "sampler": [0, 1]}):
        with pytest.raises(ValueError) as torch_exc:
            DataLoader(ds, **bad)
        with pytest.raises(ValueError) as adapter_exc:
            cls(ds, **bad)
        assert str(adapter_exc.value) == str(torch_exc.value)


# --------------------------------------------------------------------------- limits

# One configuration per kind of limit; each adapter states which of them it cannot express.
PROBES: dict[str, tuple[Any, dict[str, Any]]] = {
    "iterable": (faultinject.FaultyIterable([2, 2]), {"num_workers": 2}),
    "worker_init_fn": (None, {"num_workers": 1, "worker_init_fn": noop_init}),
    "persistent_workers": (None, {"num_workers": 1, "persistent_workers": True}),
    "timeout": (None, {"num_workers": 1, "timeout": 1}),
    "spawn": (None, {"num_workers": 1, "multiprocessing_context": "spawn"}),
    "fork": (None, {"num_workers": 1, "multiprocessing_context": "fork"}),
    "pin_memory": (None, {"num_workers": 1, "pin_memory": True}),
    "pin_memory_device": (None, {"num_workers": 1, "pin_memory": True, "pin_memory_device": "x"}),
    "unbatched": (None, {"num_workers": 1, "batch_size": None}),
    "shuffle": (None, {"num_workers": 1, "shuffle": True}),
    "sampler": (None, {"num_workers": 1, "sampler": [3, 2, 1, 0]}),
}
UNSUPPORTED = {
    "nodes-thread": {
        *("iterable", "worker_init_fn", "persistent_workers", "timeout", "spawn", "fork"),
    },
    "nodes-process": {"iterable", "worker_init_fn", "persistent_workers", "timeout"},
    "spdl": {"iterable", "worker_init_fn", "persistent_workers", "pin_memory_device"},
    "grain": {
        *("iterable", "worker_init_fn", "persistent_workers", "timeout", "fork"),
        *("pin_memory", "pin_memory_device"),
    },
    "paddle": {"spawn", "pin_memory", "pin_memory_device"},
    "litdata": {"iterable", "unbatched", "shuffle", "sampler"},
    "streaming": {"iterable", "unbatched", "shuffle", "sampler"},
    "ray": {
        *("iterable", "worker_init_fn", "persistent_workers", "timeout", "spawn", "fork"),
        "pin_memory_device",
    },
}


def test_every_graded_adapter_states_its_limits():
    # here, not only where its package is installed (the checks below skip without it)
    assert set(UNSUPPORTED) == set(ADAPTERS)


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_declared_limits_are_refused_with_one_line(name):
    cls = load(name)
    for probe, (dataset, kw) in PROBES.items():
        ds = dataset if dataset is not None else faultinject.FaultyDataset(4)
        reason = cls.loaderspec_unsupported(dataset=ds, **kw)
        assert (reason is not None) == (probe in UNSUPPORTED[name]), (probe, reason)
        if reason is None:
            continue
        assert "\n" not in reason
        with pytest.raises(NotImplementedError, match=re.escape(reason)):
            cls(ds, **kw)
    assert cls.loaderspec_unsupported(batch_size=2, num_workers=2) is None


@pytest.mark.parametrize("name", list(ADAPTERS))
def test_docs_list_every_limit_with_its_reason(name):
    cls = load(name)
    section = DOCS.read_text().split("## Adapters and their limits", 1)[-1]
    for limit in cls.limits:
        assert limit.config in section, limit
        assert limit.reason in section, limit


# --------------------------------------------------------------------------- who owns workers


def test_nodes_process_workers_outlive_the_iterator_but_not_the_loader():
    load("nodes-process")
    ds = faultinject.FaultyDataset(50)
    target = first_batches_then_drop
    report = sandbox.run(target, ref("nodes-process"), ds, 2.0, 10.0, deadline_s=60)
    assert report.outcome == "returned", report.error
    got = report.value
    assert len(got["workers"]) == 2
    assert got["after_iter"] == got["workers"]  # tn.Loader keeps its iterator, and the workers
    assert got["after_loader"] == []


def test_nodes_thread_mapper_has_no_worker_process():
    cls = load("nodes-thread")
    before = {p.pid for p in processes.children()}
    it = iter(cls(faultinject.FaultyDataset(8), batch_size=2, num_workers=2))
    next(it)
    assert processes.new_children(before) == []
    assert len(list(it)) == 3


# --------------------------------------------------------------------------- SPDL's own defects


def test_spdl_logs_a_failed_batch_and_goes_on():
    load("spdl")
    ds = faultinject.FaultyDataset(6, [Raise(4)])
    report = sandbox.run(drain, ref("spdl"), ds, batch_size=1, num_workers=2, deadline_s=60)
    assert report.outcome == "returned", report.error
    assert report.value["error"] is None  # no exception reaches the user...
    assert sorted(report.value["items"]) == [0, 1, 2, 3, 5]  # ...and item 4 is gone


def test_spdl_ends_the_epoch_quietly_when_a_worker_is_killed():
    load("spdl")
    ds = faultinject.FaultyDataset(20, [Die(4, anywhere=True)])
    report = sandbox.run(drain, ref("spdl"), ds, batch_size=1, num_workers=2, deadline_s=60)
    assert report.outcome == "returned", report.error
    assert report.value["error"] is None
    assert len(report.value["items"]) < 19  # the pool broke: every later batch was dropped
    assert all(processes.is_gone(pid) for pid in report.seen_pids), report.leftovers()


# --------------------------------------------------------------------------- grain's own defects


def test_grain_workers_outlive_a_sigkilled_parent():
    # grain polls its workers' exit codes, but nothing in a worker watches the parent: workers
    # with work left (40 items, 1 taken) keep running after the loader's process is SIGKILLed.
    # (The suite's parent-death case needs no spawn start within its setup bound; this one does.)
    load("grain")
    ds = faultinject.FaultyDataset(40)
    report = sandbox.run(busy_then_die, ref("grain"), ds, deadline_s=120, orphan_grace_s=10)
    assert report.outcome == "killed", report.error
    # Both workers (and the resource tracker, whose pipe spawned workers inherit) alive 10 s on.
    still_alive = [pid for pid, exit_s in report.orphan_exit_s.items() if exit_s is None]
    assert len(still_alive) >= 2, report.orphan_exit_s
    assert all(processes.is_gone(pid) for pid in report.seen_pids), report.leftovers()


# --------------------------------------------------------------------------- graded by the suite

# (adapter, case, outcome, words of the detail): a loader's defect as the suite grades it.
GRADED = [
    # Never notices a dead worker: next() blocks until the scenario's deadline.
    ("nodes-process", "test_death_is_reported_promptly_while_next_waits", "FAIL", "deadline"),
    # A killed pool worker ends the epoch early, quietly.
    ("spdl", "test_epoch_does_not_end_quietly_after_worker_death", "FAIL", "without an error"),
    # The worker's error is re-raised, naming no worker ("Caught ValueError in _apply_udf").
    ("nodes-thread", "test_error_is_raised_in_turn_and_iteration_continues", "FAIL", "worker"),
    # The streaming loaders (docs/conformance.md, "Findings: the streaming loaders").
    ("litdata", "test_timeout_raises_when_a_worker_hangs", "PASS", ""),
    ("litdata", "test_len_matches_the_batches_handed_out", "PASS", ""),
    # StreamingDataLoader.__iter__ is a generator: a worker's error ends it, and the epoch.
    ("litdata", "test_error_is_raised_in_turn_and_iteration_continues", "FAIL", "then dropped"),
    # A state taken right after load_state_dict() names the next worker one further on than
    # the loaded state did (Lightning-AI/litData#316's class: a restore's state is not the one
    # loaded), so resuming from it hands out items twice and loses others.
    (
        "litdata",
        "test_a_state_taken_soon_after_a_resume_is_later_than_the_loaded_one",
        "FAIL",
        "lost",
    ),
    # A dropped loader's StreamingDataset keeps its shared memory (mosaicml/streaming#264).
    ("streaming", "test_len_matches_the_batches_handed_out", "FAIL", "_locals"),
    # Ray Data: an epoch left early keeps its block prefetcher's thread (docs/conformance.md,
    # "Findings: Ray Data").
    ("ray", "test_len_matches_the_batches_handed_out", "PASS", ""),
    ("ray", "test_workers_fetch_nothing_once_shutdown_began", "FAIL", "Prefetcher"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "case", "outcome", "words"), GRADED, ids=[f"{g[0]}-{g[1]}" for g in GRADED]
)
def test_the_suite_grades_the_loaders_defect(tmp_path, name, case, outcome, words):
    load(name)
    code, out, results = run_suite(["conformance", "-k", case], ref(name), tmp_path, 240)
    assert results is not None, out[-2000:]
    graded = {c["case"]: c for c in results["cases"]}
    assert graded, out[-2000:]
    for c in graded.values():
        assert c["outcome"] == outcome, (c, out[-2000:])
        assert words in (c.get("detail") or ""), c
    assert set(outcomes(results).values()) == {outcome}
    assert code == (1 if outcome == "FAIL" else 0), out[-2000:]
    assert set(outcomes(results).values()) == {outcome}
