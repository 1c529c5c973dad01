"""Each in-worker fault really happens inside a torch.utils.data.DataLoader worker."""

from __future__ import annotations

import functools
import itertools
import json
import pickle
import signal
import time

import fi_loader_targets as T
import pytest
import torch
from loaderspec.faultinject import processes, read_fetches, sandbox
from loaderspec.faultinject.faults import (
    Die,
    Hang,
    InjectedError,
    Raise,
    RaiseUnrebuildable,
    SkewWorker,
    Sleep,
    Unloadable,
    UnloadableError,
    UnloadableItem,
    Unpicklable,
    UnpicklableItem,
    UnrebuildableError,
)
from torch.utils.data import DataLoader

from loaderspec import faultinject

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_child_left")]

# Generous: torch notices a dead worker through SIGCHLD at once, or its 5 s status poll.
DEATH_BOUND_S = 15.0
LINGER_S = 5.0


def in_sandbox(target, *args, **kwargs):
    """Run a fi_loader_targets scenario in a sandbox; fail on anything it leaves behind
    (torch's shutdown after a killed worker joins the rest and their queues' feeder threads
    asynchronously: at load 7 it has outlasted the default 1 s linger; the wait ends as soon as
    all is gone)."""
    report = sandbox.run(target, *args, deadline_s=30, linger_s=LINGER_S, **kwargs)
    assert report.outcome == "returned", report.error
    assert report.clean, report.leftovers()
    return report.value


def drain_sandboxed(ds, **kw):
    return in_sandbox(T.drain, ds, **kw)


def drain(dl):
    """Every batch of a fresh iterator until it raises (faults that kill nothing only)."""
    items = []
    it = iter(dl)
    try:
        for batch in it:
            items.extend(torch.as_tensor(batch).flatten().tolist())
    finally:
        del it
    return items


def loader(ds, **kw):
    kw.setdefault("num_workers", 2)
    if kw["num_workers"] > 0:
        kw.setdefault("multiprocessing_context", "fork")
    return DataLoader(ds, **kw)


def assert_worker_death(error, pid):
    """torch reports a dead worker by pid, or (fetching a tensor's fd from the dead worker's
    resource sharer) as a ConnectionError or EOFError, which its test_proper_exit tolerates."""
    assert error is not None
    kind, message = error
    tolerated = ("ConnectionResetError", "ConnectionRefusedError", "EOFError")
    assert kind == "RuntimeError" or kind in tolerated, error
    if kind == "RuntimeError":
        assert str(pid) in message, message


def fault_records(tmp_path):
    return [f for f in read_fetches(tmp_path, faults=True) if f.event == "fault"]


@pytest.mark.parametrize("point", ["before_fetch", "after_fetch"])
def test_die_kills_exactly_the_worker_that_fetched_the_item(tmp_path, point):
    ds = faultinject.FaultyDataset(12, [Die(5, point=point)], record_dir=tmp_path)
    got = drain_sandboxed(ds, batch_size=1, timeout=DEATH_BOUND_S, collate_fn=T.as_list)
    [fault] = fault_records(tmp_path)
    assert (fault.index, fault.fault) == (5, f"Die:{point}")
    assert fault.pid in got["workers"]
    assert fault.worker_id == got["workers"].index(fault.pid)
    assert_worker_death(got["error"], fault.pid)
    assert 5 not in got["items"]


def test_die_in_collate_kills_the_worker_collating_that_batch(tmp_path):
    die = Die(3, point="in_collate")
    ds = faultinject.FaultyDataset(8, [die], record_dir=tmp_path)
    got = drain_sandboxed(
        ds, batch_size=2, collate_fn=faultinject.collate(die, base=T.as_list), timeout=DEATH_BOUND_S
    )
    [fetch3] = [f for f in read_fetches(tmp_path) if f.index == 3]
    assert_worker_death(got["error"], fetch3.pid)
    assert not {2, 3} & set(got["items"])


def test_die_after_collate_kills_the_worker_once_the_batch_exists(tmp_path):
    die = Die(3, point="after_collate")
    made = tmp_path / "collated"
    ds = faultinject.FaultyDataset(8, [die], record_dir=tmp_path)
    collate = faultinject.collate(die, base=functools.partial(T.as_list_marking, made))
    got = drain_sandboxed(ds, batch_size=2, collate_fn=collate, timeout=DEATH_BOUND_S)
    [fetch3] = [f for f in read_fetches(tmp_path) if f.index == 3]
    assert_worker_death(got["error"], fetch3.pid)
    assert not {2, 3} & set(got["items"])
    assert "2,3" in made.read_text().split(), "the base collate made the batch before the death"


def test_collate_alone_fires_on_an_int_item_and_passes_others_through():
    c = faultinject.collate(Die(3, point="in_collate", anywhere=False))
    # In the main process (no worker info) it does not fire; it collates.
    assert c([2, 3]).tolist() == [2, 3]
    assert c([UnpicklableItem(1), 4])[1] == 4
    assert c([UnloadableItem(1), 4])[1] == 4
    assert pickle.loads(pickle.dumps(c)).faults == c.faults
    with pytest.raises(ValueError):
        faultinject.collate(Die(1))


def test_die_with_an_ignored_signal_returns(tmp_path):
    # SIGWINCH's default action is to ignore it: the "fault" then does nothing, as in real life.
    ds = faultinject.FaultyDataset(6, [Die(2, signal=signal.SIGWINCH)], record_dir=tmp_path)
    assert sorted(drain(loader(ds, batch_size=1))) == list(range(6))
    assert [f.fault for f in fault_records(tmp_path)] == ["Die:before_fetch"]


def test_die_blocked_put_dies_while_blocked_on_a_full_pipe(tmp_path):
    ds = faultinject.FaultyDataset(2, [Die(0, point="blocked_put")], record_dir=tmp_path)
    got = in_sandbox(T.blocked_put, ds, False, DEATH_BOUND_S)
    # The fault fires only once the worker is blocked writing its 8 MiB result.
    [fault] = fault_records(tmp_path)
    assert (fault.pid, fault.fault) == (got["worker"], "Die:blocked_put")
    assert got["alive_after"] == []


def test_die_idle_kills_the_worker_while_it_waits_for_work(tmp_path):
    # 3 items, 1 worker, prefetch 2: after the first batch is taken the worker fetches the last
    # item and then has nothing to do; the main process reads nothing until it is gone.
    ds = faultinject.FaultyDataset(3, [Die(2, point="idle")], record_dir=tmp_path)
    got = in_sandbox(T.take_one_then_wait_for_death, ds, DEATH_BOUND_S)
    [fault] = fault_records(tmp_path)
    assert (fault.pid, fault.index, fault.fault) == (got["worker"], 2, "Die:idle")
    assert got["alive"] == []
    [fetch2] = [f for f in read_fetches(tmp_path) if f.index == 2]
    assert fetch2.t < fault.t  # the item was made (and returned) before the worker idled
    assert got["items"][0] == 0
    assert set(got["items"]) <= {0, 1, 2}


def test_blocked_put_without_signal_leaves_the_kill_to_the_harness(tmp_path):
    ds = faultinject.FaultyDataset(2, [Die(0, signal=None, point="blocked_put")])
    got = in_sandbox(T.blocked_put, ds, True, DEATH_BOUND_S)
    assert got["blocked"]
    assert got["alive_after"] == []


def test_a_loader_hung_on_a_stuck_worker_is_ended_at_the_deadline():
    # timeout=0 and a worker that never returns: torch waits for ever (the user asked for no
    # bound). The sandbox ends the scenario at its deadline and reaps the loader and its workers.
    ds = faultinject.FaultyDataset(4, [Hang(0)])
    report = sandbox.run(T.drain, ds, batch_size=1, num_workers=1, deadline_s=1.5)
    assert report.outcome == "deadline"
    assert 1.5 <= report.elapsed_s < 10
    assert len(report.leftover_pids) == 1  # the stuck worker, alive at the deadline
    assert all(processes.is_gone(pid) for pid in report.seen_pids)


def test_hang_stops_the_worker_and_is_traced(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERSPEC_TRACE_DIR", str(tmp_path))
    # A 2 s "hang" outlives the 1 s timeout, and spares us torch's 5 s shutdown wait for a stuck
    # worker (it joins each worker for up to 5 s before terminating it).
    ds = faultinject.FaultyDataset(4, [Hang(1, seconds=2.0)], record_dir=tmp_path / "rec")
    got = drain_sandboxed(ds, batch_size=1, timeout=1, num_workers=1)
    assert got["error"][0] == "RuntimeError"
    assert "timed out" in got["error"][1]
    [fault] = fault_records(tmp_path / "rec")
    traces = [json.loads(line) for p in tmp_path.glob("trace-*.jsonl") for line in p.open()]
    [rec] = [t for t in traces if t["action"] == "FaultHangWorker"]
    assert (rec["pid"], rec["worker"], rec["actor"], rec["state"]) == (
        fault.pid,
        fault.worker_id,
        "Fault",
        {},
    )
    assert fault.t * 1e9 <= rec["t"] < fault.t * 1e9 + 1e9  # monotonic_ns, right after the record


def test_die_is_traced_before_the_kill(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERSPEC_TRACE_DIR", str(tmp_path))
    ds = faultinject.FaultyDataset(4, [Die(2)])
    got = drain_sandboxed(
        ds, batch_size=1, timeout=DEATH_BOUND_S, num_workers=1, collate_fn=T.as_list
    )
    traces = [json.loads(line) for p in tmp_path.glob("trace-*.jsonl") for line in p.open()]
    [rec] = [t for t in traces if t["action"] == "FaultKillWorker"]
    assert rec["pid"] in got["workers"]
    assert rec["worker"] == got["workers"].index(rec["pid"])
    assert_worker_death(got["error"], rec["pid"])
    assert set(rec) == {"t", "pid", "actor", "action", "worker", "task", "state"}


def test_sleep_delays_that_fetch(tmp_path):
    ds = faultinject.FaultyDataset(4, [Sleep(1, 0.3)], record_dir=tmp_path)
    assert drain(loader(ds, batch_size=1, num_workers=1)) == [0, 1, 2, 3]
    t = {f.index: f.t for f in read_fetches(tmp_path)}
    assert t[2] - t[1] >= 0.3


def test_raise_surfaces_type_message_and_iteration_goes_on(tmp_path):
    ds = faultinject.FaultyDataset(6, [Raise(3)], record_dir=tmp_path)
    it = iter(loader(ds, batch_size=1))
    got, errors = [], []
    while True:  # to StopIteration: torch then shuts its workers down at once
        try:
            got.extend(next(it).tolist())
        except InjectedError as exc:
            errors.append(str(exc))
        except StopIteration:
            break
    assert got == [0, 1, 2, 4, 5]
    [msg] = errors
    assert "injected fault at item 3" in msg
    assert "DataLoader worker process" in msg


def test_raise_unrebuildable_cannot_be_rebuilt_nor_unpickled():
    ds = faultinject.FaultyDataset(3, [RaiseUnrebuildable(1)])
    with pytest.raises(UnrebuildableError) as info:
        ds[1]
    exc = info.value
    with pytest.raises(TypeError):
        type(exc)(str(exc))
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(exc))


def test_raise_unrebuildable_in_a_torch_worker_keeps_its_message():
    ds = faultinject.FaultyDataset(3, [RaiseUnrebuildable(1)])
    it = iter(loader(ds, batch_size=1, num_workers=1))
    assert next(it).tolist() == [0]
    # torch cannot rebuild it and falls back to RuntimeError carrying the message.
    with pytest.raises(RuntimeError, match="unrebuildable fault at item 1"):
        next(it)
    del it


def test_unpicklable_item_is_made_in_the_worker(tmp_path):
    ds = faultinject.FaultyDataset(3, [Unpicklable(1)], record_dir=tmp_path)
    item = ds[1]
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(item)
    # In torch the put fails in the queue's feeder thread and nothing arrives (pytorch#142884).
    dl = loader(ds, batch_size=1, num_workers=1, timeout=1, collate_fn=faultinject.collate())
    it = iter(dl)
    assert next(it).tolist() == [0]
    with pytest.raises(RuntimeError, match="timed out"):
        next(it)
    del it
    workers = {f.pid for f in fault_records(tmp_path)}
    assert len(workers) == 2  # the main process (ds[1] above) and one worker
    assert all(f.fault == "Unpicklable" for f in fault_records(tmp_path))


def test_unloadable_item_pickles_in_the_worker_and_fails_where_it_is_read(tmp_path):
    ds = faultinject.FaultyDataset(3, [Unloadable(1)], record_dir=tmp_path)
    blob = pickle.dumps(ds[1])  # pickles where it is made
    with pytest.raises(UnloadableError, match=r"UnloadableItem\(1\) cannot be unpickled"):
        pickle.loads(blob)
    # torch's main process gets the error from its queue's get and raises it as it is.
    it = iter(loader(ds, batch_size=1, num_workers=1, collate_fn=faultinject.collate()))
    assert next(it).tolist() == [0]
    with pytest.raises(UnloadableError):
        next(it)
    del it
    assert {f.fault for f in fault_records(tmp_path)} == {"Unloadable"}


def test_skew_worker_slows_only_that_worker(tmp_path):
    ds = faultinject.FaultyDataset(6, [SkewWorker(0, 0.15)], record_dir=tmp_path)
    assert sorted(drain(loader(ds, batch_size=1))) == list(range(6))
    by_worker: dict[int, list[float]] = {}
    for f in read_fetches(tmp_path):
        by_worker.setdefault(f.worker_id, []).append(f.t)
    gaps0 = [b - a for a, b in zip(by_worker[0], by_worker[0][1:], strict=False)]
    assert gaps0
    assert min(gaps0) >= 0.15


def test_skew_finds_worker_0_among_workers_without_worker_info(tmp_path):
    """Threads without worker info (torchdata.nodes' mapper) get ordinals in the order they
    first fetch; the first is worker 0 and only it is slowed."""
    import threading

    ds = faultinject.FaultyDataset(4, [SkewWorker(0, 0.15)], record_dir=tmp_path)
    took: dict[int, float] = {}
    fetched = [threading.Event(), threading.Event()]
    done = threading.Event()

    def fetch(i: int) -> None:
        start = time.monotonic()
        ds[i]
        took[i] = time.monotonic() - start
        fetched[i].set()
        done.wait(10)  # alive until both fetched, as a loader's worker threads are

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(2)]
    for i, t in enumerate(threads):  # one after the other: thread i claims ordinal i
        t.start()
        assert fetched[i].wait(10)
    done.set()
    for t in threads:
        t.join()
    ds[2]  # the thread that built the dataset is no worker: never slowed
    assert took[0] >= 0.15 > took[1]


def test_once_fires_in_one_process_only_across_epochs(tmp_path):
    ds = faultinject.FaultyDataset(6, [Die(2, once=True)], record_dir=tmp_path)
    first, second = in_sandbox(
        T.drain_epochs, ds, 2, batch_size=1, timeout=DEATH_BOUND_S, collate_fn=T.as_list
    )
    [fault] = fault_records(tmp_path)
    assert_worker_death(first["error"], fault.pid)
    # A fresh iterator has fresh workers; the marker file keeps the fault from firing again.
    assert second["error"] is None
    assert sorted(second["items"]) == list(range(6))


def test_records_and_epoch_hints(tmp_path):
    ds = faultinject.FaultyDataset(4, record_dir=tmp_path)
    dl = loader(ds, batch_size=2)
    for _ in range(2):
        assert drain(dl) == [0, 1, 2, 3]
    fetches = read_fetches(tmp_path)
    assert sorted((f.index, f.epoch_hint) for f in fetches) == [
        (i, e) for i in range(4) for e in range(2)
    ]
    assert {f.worker_id for f in fetches} == {0, 1}
    assert all(a.t <= b.t for a, b in itertools.pairwise(fetches))


def test_die_and_hang_stay_out_of_the_main_process():
    ds = faultinject.FaultyDataset(3, [Die(0), Hang(1)])
    assert [ds[i] for i in range(3)] == [0, 1, 2]


@pytest.mark.parametrize("num_workers", [0, 2, 3])
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_iterable_uneven_shards(tmp_path, num_workers):
    ds = faultinject.FaultyIterable([0, 3, 5], record_dir=tmp_path)
    items = drain(loader(ds, batch_size=None, num_workers=num_workers))
    assert sorted(items) == sorted(ds.expected())
    if num_workers == 3:
        for w in range(3):
            mine = [f.index for f in read_fetches(tmp_path) if f.worker_id == w]
            assert mine == ds.expected(w, 3)
    if num_workers == 0:
        assert items == ds.expected()


def test_iterable_once_die_kills_one_worker_at_its_kth_item(tmp_path):
    ds = faultinject.FaultyIterable([4, 4], [Die(2, once=True)], record_dir=tmp_path)
    got = drain_sandboxed(ds, batch_size=None, timeout=DEATH_BOUND_S)
    [fault] = fault_records(tmp_path)
    assert_worker_death(got["error"], fault.pid)
    assert fault.pid in got["workers"]
    assert fault.k == 2
    assert fault.index == fault.worker_id * 1_000_000 + 2


def test_datasets_pickle_for_spawn(tmp_path):
    for ds in (
        faultinject.FaultyDataset(3, [Die(1, once=True)], record_dir=tmp_path),
        faultinject.FaultyIterable([1, 2], [Raise(0)]),
    ):
        copy = pickle.loads(pickle.dumps(ds))
        assert copy.faults == ds.faults
        assert copy.state_dir == ds.state_dir


@pytest.mark.slow
def test_faults_work_under_spawn(tmp_path):
    ds = faultinject.FaultyDataset(3, [Raise(1)], record_dir=tmp_path)
    dl = loader(ds, batch_size=1, num_workers=1, multiprocessing_context="spawn", timeout=30)
    it = iter(dl)
    assert next(it).tolist() == [0]
    with pytest.raises(InjectedError):
        next(it)
    assert next(it).tolist() == [2]
    with pytest.raises(StopIteration):  # torch shuts its workers down now, not at gc
        next(it)
    assert [f.worker_id for f in read_fetches(tmp_path)] == [0, 0, 0]


def test_sandbox_times_a_busy_torch_worker_after_its_parent_is_killed(tmp_path):
    # torch's workers check for parent death only between tasks (pytorch#5736's watchdog), so a
    # worker busy in __getitem__ outlives its parent (Megatron-LM#3684): the sandbox must see it
    # as an orphan, time it out and reap it.
    ds = faultinject.FaultyDataset(2, [Hang(0)], record_dir=tmp_path)
    report = sandbox.run(
        T.busy_worker_then_kill_self, ds, str(tmp_path), 10.0, deadline_s=30, orphan_grace_s=0.5
    )
    assert report.outcome == "killed"
    [fetch] = read_fetches(tmp_path)
    assert report.orphan_exit_s[fetch.pid] is None
    assert fetch.pid in report.leftover_pids
    assert fetch.pid in report.orphans
    assert processes.is_gone(fetch.pid)
