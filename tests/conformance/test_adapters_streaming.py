"""The streaming loaders behind torch's constructor: litdata's StreamingDataLoader and Mosaic
streaming's (streaming-community). Each part skips cleanly, naming the extra, where its package
is absent (each is installed in a virtualenv
of its own: scripts/matrix.sh). Their declared limits and docs rows are checked with the other
adapters' (test_adapters_field.py).

For each: its batches equal torch's where it can express the configuration, its own
checkpoint resumes where it stopped, and its shared memory is kept as the docs' findings say;
a handful of the suite's cases grade each (test_adapters_field.py's GRADED).
"""

from __future__ import annotations

import pytest
import torch
from adapter_scenarios import (  # the fixtures are autouse: imported, they apply here
    assert_drains_as_torch,
    load,
    reap_finished_workers,  # noqa: F401
    ref,
    shm_after_drops,
)
from loaderspec.faultinject import sandbox
from torch.utils.data import DataLoader

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("no_child_left")]


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
    assert_drains_as_torch("streaming", n, kw, deadline_s=60)


def test_streaming_keeps_each_datasets_shared_memory_until_the_process_exits():
    # mosaicml/streaming#264: SharedMemory registers atexit.register(self.cleanup), which keeps
    # every segment (and its fds) of a dropped loader's dataset alive until the interpreter ends.
    load("streaming")
    report = sandbox.run(shm_after_drops, ref("streaming"), 2, deadline_s=60)
    assert report.outcome == "returned", report.error
    assert report.value["prefixes"] == 2, report.value
    assert report.value["child_held"], report.value
    assert report.value["after_exit"] == []  # ...and atexit then frees them all
