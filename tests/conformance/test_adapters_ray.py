"""Ray Data behind torch's constructor (conformance.adapters.ray). Skips, naming the extra, where
ray is absent (it is installed in a virtualenv of its own: scripts/matrix.sh). Its declared
limits and docs rows are checked with the other adapters' (test_adapters_field.py).

Every test drives Ray in a sandbox child: a process that joined Ray cannot fork, and this test
process forks every sandbox. The children join one Ray runtime owned by this process
(conformance.adapters._ray_runtime), started by building a loader here (`one_runtime`): it
outlives each test, by design.

Checked: the batches are torch's, in torch's order, for the configurations the adapter takes
(Ray batches the sampler's indices); the runtime is one per owner and joined, not restarted; an
abandoned iterator leaves Ray Data's block prefetcher thread running (the suite's finding); and
ray-project/ray#42008 reproduces beside the suite: one split of `streaming_split(2, equal=True)`
iterated alone never hands out a row.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

import pytest
import torch
from adapter_scenarios import assert_drains_as_torch, load, ref
from loaderspec.faultinject import loaders, sandbox
from torch.utils.data import DataLoader

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def one_runtime() -> None:
    """One Ray runtime for the module's sandbox children: built here, a loader starts it for
    this process, as the suite's harness does, without joining Ray (this process forks)."""
    load("ray")(faultinject.FaultyDataset(1), batch_size=1)


CONFIGS = [
    (10, {"batch_size": 3}),
    (10, {"batch_size": 3, "num_workers": 2}),
    (7, {"batch_size": 2, "num_workers": 3, "drop_last": True}),
    (5, {"batch_size": None, "num_workers": 1}),
    (0, {"batch_size": 2}),
    (9, {"batch_size": 4, "num_workers": 2, "sampler": [8, 1, 7, 2, 6, 3, 5, 4, 0]}),
]


@pytest.mark.parametrize(("n", "kw"), CONFIGS, ids=lambda x: str(x))
def test_ray_hands_out_torchs_batches_in_torchs_order(n, kw):
    load("ray")
    assert_drains_as_torch("ray", n, kw, deadline_s=120)


def seeded_shuffles(loader_path: str, seed: int) -> list[list[int]]:
    cls = loaders.resolve(loader_path)
    g = torch.Generator().manual_seed(seed)
    loader = cls(faultinject.FaultyDataset(10), batch_size=3, shuffle=True, generator=g)
    return [[int(i) for b in loader for i in b] for _ in range(2)]


def test_ray_shuffles_with_torchs_sampler_and_generator():
    load("ray")
    report = sandbox.run(seeded_shuffles, ref("ray"), 3, deadline_s=120)
    assert report.outcome == "returned", report.error
    g = torch.Generator().manual_seed(3)
    torchs = DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=g)
    assert report.value == [[int(i) for b in torchs for i in b] for _ in range(2)]


def runtime_of_this_process(_: Any = None) -> dict[str, Any]:
    from loaderspec.conformance.adapters import _ray_runtime

    loaders.start_process_helpers(loaders.resolve(ref("ray")))
    sandbox.mark_baseline()  # as the suite does: joining Ray is the process's, not a loader's
    where = _ray_runtime.folder()
    return {"owner": _ray_runtime.owner(), "pid": int((where / "pid").read_text())}


def test_every_loader_process_of_one_owner_joins_one_runtime():
    load("ray")
    first = sandbox.run(runtime_of_this_process, deadline_s=120)
    second = sandbox.run(runtime_of_this_process, deadline_s=120)
    assert first.outcome == second.outcome == "returned", (first.error, second.error)
    assert first.value["owner"] == second.value["owner"] == os.getpid()
    assert first.value["pid"] == second.value["pid"]  # the same runtime, not a new cluster
    # The runtime is no process of the scenario's: nothing of it is counted as left behind.
    assert first.clean, first.leftovers()
    assert second.clean, second.leftovers()


def built_only(loader_path: str) -> dict[str, Any]:
    import ray
    from loaderspec.conformance.adapters import _ray_runtime

    loaders.resolve(loader_path)(faultinject.FaultyDataset(4), batch_size=2)
    pid = os.fork()  # a process that joined Ray could not fork safely
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return {"joined": ray.is_initialized(), "runtime": _ray_runtime._found() is not None}


def test_the_constructor_starts_a_runtime_without_joining_it():
    # The harness builds a loader before any scenario: the cluster comes up then, outside every
    # scenario's deadline, and the harness (which forks every scenario) never joins Ray.
    load("ray")
    report = sandbox.run(built_only, ref("ray"), deadline_s=120)
    assert report.outcome == "returned", report.error
    assert report.value == {"joined": False, "runtime": True}


def prefetchers_after_abandoned_iterators(loader_path: str, iterators: int) -> list[str]:
    cls = loaders.resolve(loader_path)
    cls.loaderspec_process_helpers()
    before = {t.ident for t in threading.enumerate()}
    for _ in range(iterators):
        it = iter(cls(faultinject.FaultyDataset(8), batch_size=2, num_workers=1))
        next(it)
        del it
        gc.collect()
    return sorted(t.name for t in threading.enumerate() if t.ident not in before)


def test_an_abandoned_ray_iterator_keeps_its_block_prefetcher_thread():
    # Ray Data's WaitBlockPrefetcher starts a thread whose target is its own bound method, so
    # the prefetcher is never collected and its __del__ (stop()) never runs: each epoch left
    # early keeps a parked "Prefetcher" thread for the life of the process: 9-10 of 10 (3 runs
    # measured), 2-3 of 3; not every one (the suite's early-exit cases vary between runs too).
    load("ray")
    report = sandbox.run(prefetchers_after_abandoned_iterators, ref("ray"), 10, deadline_s=120)
    assert report.outcome == "returned", report.error
    assert report.value.count("Prefetcher") >= 5, report.value


def one_split_alone(wait_s: float) -> dict[str, Any]:
    """ray-project/ray#42008: iterate split 0 of `streaming_split(2, equal=True)` alone (its
    peer never iterates), in a thread, for `wait_s`: what it handed out, and whether it ended."""
    import ray.data

    loaders.resolve(ref("ray")).loaderspec_process_helpers()
    split, _peer = ray.data.range(8).streaming_split(2, equal=True)
    rows: list[int] = []

    def consume() -> None:
        for batch in split.iter_batches(batch_size=1):
            rows.extend(int(i) for i in batch["id"])

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(wait_s)
    return {"rows": rows, "ended": not thread.is_alive()}


def test_one_streaming_split_iterated_alone_never_hands_out_a_row():
    # ray-project/ray#42008 ("streaming_split blocked waiting on other clients"), reproduced
    # beside the suite: the suite's ranks are processes of their own, each a Ray driver of its
    # own job, while streaming_split's coordinator is an actor of the one driver that split
    # the dataset (docs/conformance.md, Ray Data's findings).
    load("ray")
    report = sandbox.run(one_split_alone, 20.0, deadline_s=180)
    assert report.outcome == "returned", report.error
    assert report.value == {"rows": [], "ended": False}
