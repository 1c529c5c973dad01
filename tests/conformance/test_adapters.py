"""The loader adapters: paddle.io.DataLoader and torchdata's StatefulDataLoader behind torch's
constructor. Each part skips cleanly where its optional package is absent. (torchdata.nodes,
SPDL and grain: test_adapters_field.py.)"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

import pytest
import torch
from adapter_scenarios import (  # the fixtures are autouse: imported, they apply here
    as_list,
    drain,
    first_batches_then_drop,
    flat,
    reap_finished_workers,  # noqa: F401
)
from loaderspec.faultinject import processes, read_fetches, sandbox
from loaderspec.faultinject.faults import Die, Hang
from torch.utils.data import DataLoader, Dataset, get_worker_info

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_child_left")]


PADDLE = "loaderspec.conformance.adapters.paddle:Loader"
TORCHDATA = "loaderspec.conformance.adapters.torchdata:Loader"


class WorkerView(Dataset):
    """Each item says which worker made it, under which seed, as torch's API reports it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        info = get_worker_info()
        if info is None:
            return {"i": i, "w": -1, "n": 0, "seed_ok": True}
        return {
            "i": i,
            "w": info.id,
            "n": info.num_workers,
            "seed_ok": torch.initial_seed() == info.seed,
            "seed": info.seed,
        }


def next_after_a_hang(timeout: float, bound_s: float) -> dict[str, Any]:
    """One worker hangs at item 1 and `timeout` is set: does next() raise within `bound_s`?
    (next() runs in a daemon thread, so the scenario itself stays bounded.)"""
    from loaderspec.conformance.adapters.paddle import Loader

    ds = faultinject.FaultyDataset(4, [Hang(1, seconds=600)])
    it = iter(Loader(ds, batch_size=1, num_workers=1, timeout=timeout))
    out: dict[str, Any] = {"first": next(it).tolist()}

    def second() -> None:
        try:
            out["second"] = next(it).tolist()
        except Exception as e:
            out["error"] = (type(e).__name__, str(e))

    t0 = time.monotonic()
    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    waiter.join(bound_s)
    out["waited_s"] = time.monotonic() - t0
    out["still_waiting"] = waiter.is_alive()
    return out


def abandon_after_one_batch(bound_s: float) -> dict[str, Any]:
    """Take one batch of a 2-worker paddle loader, drop the iterator (and collect): which
    workers and threads are still there `bound_s` later?"""
    from loaderspec.conformance.adapters.paddle import Loader

    before = {p.pid for p in processes.children()}
    it = iter(Loader(faultinject.FaultyDataset(50), batch_size=1, num_workers=2))
    next(it)
    workers = processes.new_children(before)
    del it
    gc.collect()
    alive = processes.wait_gone(workers, bound_s)
    return {"workers": workers, "alive": alive, "threads": [t.name for t in threading.enumerate()]}


# --------------------------------------------------------------------------- paddle


@pytest.fixture(scope="module")
def paddle_loader():
    pytest.importorskip("paddle", exc_type=ImportError, reason="paddlepaddle is an optional extra")
    from loaderspec.conformance.adapters.paddle import Loader

    return Loader


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size", [None, 3])
@pytest.mark.parametrize("iterable", [False, True])
def test_paddle_yields_what_torch_yields(paddle_loader, num_workers, batch_size, iterable):
    ds = faultinject.FaultyIterable([2, 5]) if iterable else faultinject.FaultyDataset(10)
    kw = {"batch_size": batch_size, "num_workers": num_workers}
    got = list(paddle_loader(ds, **kw))
    want = list(DataLoader(ds, **kw))
    # Workers interleave iterable shards in their own order; map-style order is the sampler's.
    if iterable:
        assert sorted(flat(got)) == sorted(flat(want))
    else:
        assert [torch.as_tensor(b).tolist() for b in got] == [
            torch.as_tensor(b).tolist() for b in want
        ]
    assert all(isinstance(b, torch.Tensor | int) for b in got)


def test_paddle_shuffles_with_torchs_generator(paddle_loader):
    ds = faultinject.FaultyDataset(20)
    got = paddle_loader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    want = DataLoader(ds, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    assert [b.tolist() for b in got] == [b.tolist() for b in want]


def test_paddle_len_is_torchs(paddle_loader):
    # Validation (torch's errors) is checked for every adapter in test_adapters_field.py.
    ds = faultinject.FaultyDataset(10)
    assert len(paddle_loader(ds, batch_size=3)) == len(DataLoader(ds, batch_size=3)) == 4
    assert len(paddle_loader(ds, batch_size=3, drop_last=True)) == 3


def test_paddle_refuses_a_start_method_it_cannot_honour(paddle_loader):
    ds = faultinject.FaultyDataset(4)
    with pytest.raises(NotImplementedError, match="other than fork"):
        paddle_loader(ds, num_workers=1, multiprocessing_context="spawn")
    assert len(list(paddle_loader(ds, num_workers=1, multiprocessing_context="fork"))) == 4


def test_paddle_workers_answer_torchs_get_worker_info(paddle_loader):
    gen = torch.Generator().manual_seed(3)
    batches = list(paddle_loader(WorkerView(), batch_size=2, num_workers=2, generator=gen))
    rows = [{k: v[j].item() for k, v in b.items()} for b in batches for j in range(len(b["i"]))]
    assert sorted(r["i"] for r in rows) == list(range(8))
    assert {r["w"] for r in rows} == {0, 1}
    assert {r["n"] for r in rows} == {2}
    assert all(r["seed_ok"] for r in rows)
    seeds = {r["w"]: r["seed"] for r in rows}
    assert seeds[1] == seeds[0] + 1  # torch's base_seed + worker id


def test_paddle_passes_non_tensor_batches_through(paddle_loader):
    ds = faultinject.FaultyDataset(3, item=str)
    assert list(paddle_loader(ds, batch_size=None, num_workers=1)) == ["0", "1", "2"]


def test_a_fault_fires_inside_a_paddle_worker(paddle_loader, tmp_path):
    ds = faultinject.FaultyDataset(6, [Die(4)], record_dir=tmp_path)
    report = sandbox.run(drain, PADDLE, ds, batch_size=1, num_workers=2, deadline_s=60)
    assert report.outcome == "returned", report.error
    [fault] = [f for f in read_fetches(tmp_path, faults=True) if f.event == "fault"]
    assert fault.worker_id in (0, 1)
    got = report.value
    assert got["error"] is not None  # paddle reports the death its own way
    assert 4 not in got["items"]
    assert fault.pid in got["workers"]
    # The failed iterator is abandoned, and paddle's abandoned iterators keep their workers
    # (test_paddle_abandoned_iterator_keeps_its_workers): the survivor is the sandbox's to reap.
    assert fault.pid not in report.leftover_pids
    assert set(report.leftover_pids) <= set(got["workers"])
    assert all(processes.is_gone(pid) for pid in report.seen_pids)
    # Shared-memory segments are named with the pid of the worker that made them.
    assert all(
        any(name.startswith(f"paddle_{pid}_") for pid in got["workers"])
        for name in report.leaked_shm
    )


def test_paddle_timeout_never_fires(paddle_loader):
    # paddle reads its result queue with `timeout` but, on queue.Empty with every worker alive,
    # goes on waiting (dataloader_iter.py `_get_data`): a hung worker blocks next() for ever.
    report = sandbox.run(next_after_a_hang, 0.5, 3.0, deadline_s=60)
    assert report.outcome == "returned", report.error
    got = report.value
    assert got["first"] == [0]
    assert "error" not in got
    assert got["still_waiting"]
    assert got["waited_s"] >= 3.0  # 6 x the timeout, and no RuntimeError
    assert all(processes.is_gone(pid) for pid in report.seen_pids)


def test_paddle_abandoned_iterator_keeps_its_workers(paddle_loader):
    # paddle's reader thread holds its iterator, so `del it` (a `break`, an exception in the
    # loop) never reaches `__del__`: workers, reader thread, pipes and /dev/shm segments stay
    # until the interpreter exits (its atexit hook ends them; a forked child's os._exit or a
    # SIGKILL leaves the workers orphaned, here reaped by the sandbox).
    report = sandbox.run(abandon_after_one_batch, 2.0, deadline_s=60, orphan_grace_s=0.5)
    assert report.outcome == "returned", report.error
    got = report.value
    assert len(got["workers"]) == 2
    assert got["alive"] == got["workers"]
    assert any(name.endswith("(_thread_loop)") for name in got["threads"])
    assert set(report.leftover_pids) == set(got["workers"])
    assert all(processes.is_gone(pid) for pid in report.seen_pids)


# --------------------------------------------------------------------------- torchdata


@pytest.fixture(scope="module")
def torchdata_loader():
    pytest.importorskip("torchdata", exc_type=ImportError, reason="torchdata is an optional extra")
    from loaderspec.conformance.adapters.torchdata import Loader

    return Loader


def test_torchdata_is_a_stateful_dataloader_that_says_who_owns_its_workers(torchdata_loader):
    from torchdata.stateful_dataloader import StatefulDataLoader

    assert issubclass(torchdata_loader, StatefulDataLoader)
    assert torchdata_loader.workers_die_with == "loader"
    ds = faultinject.FaultyDataset(10)
    got = [b.tolist() for b in torchdata_loader(ds, batch_size=4, num_workers=2)]
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_torchdata_workers_outlive_the_iterator_but_not_the_loader(torchdata_loader):
    ds = faultinject.FaultyDataset(50)
    report = sandbox.run(first_batches_then_drop, TORCHDATA, ds, 2.0, 10.0, deadline_s=60)
    assert report.outcome == "returned", report.error
    got = report.value
    assert len(got["workers"]) == 2
    assert got["after_iter"] == got["workers"]  # the loader still holds its iterator
    assert got["after_loader"] == []
    assert report.clean, report.leftovers()


def test_torch_workers_die_with_the_iterator():
    # The contrast that workers_die_with="iterator" states, checked on torch itself.
    report = sandbox.run(
        first_batches_then_drop,
        "torch.utils.data:DataLoader",
        faultinject.FaultyDataset(50),
        10.0,
        10.0,
        deadline_s=60,
    )
    assert report.outcome == "returned", report.error
    assert report.value["after_iter"] == []


def test_a_fault_fires_inside_a_torchdata_worker(torchdata_loader, tmp_path):
    ds = faultinject.FaultyDataset(6, [Die(4)], record_dir=tmp_path)
    kw = {"batch_size": 1, "num_workers": 2, "collate_fn": as_list}
    report = sandbox.run(drain, TORCHDATA, ds, **kw, deadline_s=60)
    assert report.outcome == "returned", report.error
    [fault] = [f for f in read_fetches(tmp_path, faults=True) if f.event == "fault"]
    assert fault.worker_id in (0, 1)
    assert report.value["error"] is not None
    # torchdata's shutdown after a worker death (torch's) sometimes leaves the dead worker's
    # zombie and its pipes behind: a defect of the loader, graded by the conformance report
    # (ShutdownCompletes), not of the adapter. What it left is the sandbox's to reap.
    assert all(processes.is_gone(pid) for pid in report.seen_pids), report.leftovers()
