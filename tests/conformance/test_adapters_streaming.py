"""The streaming loaders behind torch's constructor: litdata's StreamingDataLoader and Mosaic
streaming's (streaming-community). Each part skips cleanly, naming the extra, where its package
is absent (each is installed in a virtualenv
of its own: scripts/matrix.sh). Their declared limits and docs rows are checked with the other
adapters' (test_adapters_field.py).

For each: its batches equal torch's where it can express the configuration, its own
checkpoint resumes where it stopped, and a handful of the suite's cases grade it as the docs'
findings say (docs/conformance.md, "Findings").
"""

from __future__ import annotations

import importlib

import pytest
import torch
from adapter_scenarios import (  # the fixtures are autouse: imported, they apply here
    drain,
    flat,
    reap_finished_workers,  # noqa: F401
    shm_after_drops,
)
from conformance_runner import outcomes, run_suite
from loaderspec.faultinject import sandbox
from torch.utils.data import DataLoader

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_child_left")]

# adapter -> (module, the package it needs, the extra that installs it)
STREAMING = {
    "litdata": ("litdata", "litdata", "litdata"),
    "streaming": ("streaming", "streaming-community", "streaming"),
}


def load(name: str) -> type:
    # The adapter module, not the package: streaming's package __init__ cannot be imported
    # beside torch's CPU build (conformance/adapters/streaming.py says why); its adapter can.
    module, package, extra = STREAMING[name]
    try:
        adapter = importlib.import_module(f"loaderspec.conformance.adapters.{module}")
    except ImportError:
        pytest.skip(f"{package} is the optional extra loaderspec[{extra}]")
    return adapter.Loader


def ref(name: str) -> str:
    return f"loaderspec.conformance.adapters.{STREAMING[name][0]}:Loader"


def as_lists(batches) -> list:
    return [torch.as_tensor(b).tolist() for b in batches]


# --------------------------------------------------------------------------- litdata

# Uneven splits included: litdata gives whole batches per worker and the rest to one worker.
LITDATA_CONFIGS = [
    (10, {"batch_size": 3, "num_workers": 2}),
    (7, {"batch_size": 2, "num_workers": 3}),
    (12, {"batch_size": 2, "num_workers": 4}),
    (10, {"batch_size": 4, "num_workers": 0, "drop_last": True}),
    (10, {"batch_size": 3, "num_workers": 2, "drop_last": True}),
]


@pytest.mark.parametrize(("n", "kw"), LITDATA_CONFIGS, ids=lambda x: str(x))
def test_litdata_hands_out_torchs_batches_in_torchs_order(n, kw):
    cls = load("litdata")
    ds = faultinject.FaultyDataset(n)
    loader = cls(ds, **kw)
    want = as_lists(DataLoader(ds, **kw))
    assert as_lists(loader) == want
    assert len(loader) == len(want)


def test_litdata_resumes_from_its_own_state_in_a_new_loader():
    cls = load("litdata")
    ds = faultinject.FaultyDataset(10)
    first = cls(ds, batch_size=2, num_workers=2)
    it = iter(first)
    taken = [next(it).tolist() for _ in range(3)]
    state = first.state_dict()
    del it, first
    second = cls(ds, batch_size=2, num_workers=2)
    second.load_state_dict(state)
    assert taken + as_lists(second) == as_lists(DataLoader(ds, batch_size=2))


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize(("n", "kw"), LITDATA_CONFIGS, ids=lambda x: str(x))
def test_streaming_hands_out_torchs_batches_in_torchs_order(n, kw):
    # In a sandbox child: each StreamingDataset keeps its shared memory until its process exits.
    load("streaming")
    ds = faultinject.FaultyDataset(n)
    report = sandbox.run(drain, ref("streaming"), ds, deadline_s=60, **kw)
    assert report.outcome == "returned", report.error
    assert report.value["error"] is None
    assert report.value["items"] == flat(DataLoader(ds, **kw))


def test_streaming_keeps_each_datasets_shared_memory_until_the_process_exits():
    # mosaicml/streaming#264: SharedMemory registers atexit.register(self.cleanup), which keeps
    # every segment (and its fds) of a dropped loader's dataset alive until the interpreter ends.
    load("streaming")
    report = sandbox.run(shm_after_drops, ref("streaming"), 2, deadline_s=60)
    assert report.outcome == "returned", report.error
    assert report.value["prefixes"] == 2, report.value
    assert report.value["child_held"], report.value
    assert report.value["after_exit"] == []  # ...and atexit then frees them all


# --------------------------------------------------------------------------- graded by the suite

# (adapter, case, outcome, words of the detail): as docs/conformance.md's findings say.
GRADED = [
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
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "case", "outcome", "words"), GRADED, ids=[g[1] for g in GRADED])
def test_the_suite_grades_the_streaming_loader(tmp_path, name, case, outcome, words):
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
