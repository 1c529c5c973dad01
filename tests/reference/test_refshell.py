"""The reference loader with real worker processes: results equal torch's, faults, cleanup.

Wall-clock bounds are not asserted here (figures belong to bench/); waits are bounded so a
hang fails the test instead of blocking it. Every test leaves no child process behind (checked,
and cleaned up by PID if not).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import threading
import typing
import warnings
from pathlib import Path

import psutil
import pytest
import torch
import torch.utils.data as tud
from loaderspec.faultinject import processes
from loaderspec.faultinject.faults import Unloadable
from loaderspec.reference import DataLoader
from loaderspec.reference.messages import TimedOut
from refshell_datasets import (
    Locks,
    Pids,
    Seeds,
    Shards,
    Slow,
    Squares,
    failing_collate,
    failing_init,
)

from loaderspec import faultinject, tracewriter
from loaderspec.vocabulary import MAIN_STATE_FIELDS

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_child_left")]


def _children() -> list[psutil.Process]:
    return processes.children(helpers=False)


def _values(batches) -> list:
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in batches]


def _gen(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------- equal to torch ---------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 4},
        {"batch_size": 3, "drop_last": True},
        {"batch_size": 4, "shuffle": True},
        {"batch_size": None},
        {"batch_size": 2, "prefetch_factor": 1},
    ],
)
def test_map_style_batches_equal_torch(kwargs):
    ds = Squares(23)
    ours = _values(DataLoader(ds, num_workers=2, generator=_gen(), **kwargs))
    prefetch = kwargs.pop("prefetch_factor", None)
    del prefetch
    theirs = _values(tud.DataLoader(ds, num_workers=0, generator=_gen(), **kwargs))
    assert ours == theirs


def test_len_equals_torch():
    for kwargs in ({"batch_size": 4}, {"batch_size": 4, "drop_last": True}, {"batch_size": None}):
        assert len(DataLoader(Squares(23), **kwargs)) == len(tud.DataLoader(Squares(23), **kwargs))
        shards = Shards((3, 5))
        assert len(DataLoader(shards, **kwargs)) == len(tud.DataLoader(shards, **kwargs))


def test_worker_seeds_and_rngs_equal_torch():
    """Given a seeded generator: the same shuffled batches, worker seeds, RNG draws and
    get_worker_info() fields as torch's workers."""
    kwargs = {"batch_size": 2, "num_workers": 2, "shuffle": True}
    ours = list(DataLoader(Seeds(), generator=_gen(3), **kwargs))
    theirs = list(tud.DataLoader(Seeds(), generator=_gen(3), **kwargs))
    assert [[x.tolist() for x in b] for b in ours] == [[x.tolist() for x in b] for b in theirs]
    assert {int(w) for b in ours for w in b[0]} == {0, 1}  # get_worker_info() in both workers
    assert all(b[3].all() for b in ours)  # info.dataset: the worker's copy of the dataset
    assert [int(i) for b in ours for i in b[7]] != list(range(8))  # really shuffled


def test_iterable_shards_equal_torch():
    ds = Shards((3, 6))
    ours = _values(DataLoader(ds, batch_size=2, num_workers=2))
    theirs = _values(tud.DataLoader(ds, batch_size=2, num_workers=2))
    assert ours == theirs


def test_single_process_path():
    ds = Squares(10)
    assert _values(DataLoader(ds, batch_size=3)) == _values(tud.DataLoader(ds, batch_size=3))


def test_a_forked_copy_of_an_iterator_leaves_the_owners_workers_alone():
    """A process forked while an iterator lives (a later loader's worker, a user's fork) holds
    a copy of it; dropping that copy must not shut down the owner's workers."""
    it = iter(DataLoader(Squares(8), batch_size=1, num_workers=2))
    first = next(it)
    pid = os.fork()
    if pid == 0:  # the copy: drop it, then leave without the parent's exit handlers
        code = 0
        try:
            del it
            gc.collect()
        except BaseException:
            code = 1
        os._exit(code)
    assert psutil.Process(pid).wait(timeout=30) == 0
    rest = [next(it) for _ in range(7)]  # the owner's workers still serve it
    assert [int(b[0][0]) for b in [first, *rest]] == list(range(8))
    with pytest.raises(StopIteration):
        next(it)


def test_in_order_false_hands_out_every_batch_once():
    loader = DataLoader(Squares(40), batch_size=3, num_workers=2, prefetch_factor=3, in_order=False)
    got = _values(loader)
    flat = sorted(row[0] for batch in got for row in batch)
    assert flat == list(range(40))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_start_methods(method):
    """Workers that import everything afresh: batches, worker ids and seeds equal torch's."""
    ctx = multiprocessing.get_context(method)
    kwargs = {"batch_size": 2, "num_workers": 2, "multiprocessing_context": ctx}
    ours = list(DataLoader(Seeds(), generator=_gen(5), **kwargs))
    theirs = list(tud.DataLoader(Seeds(), generator=_gen(5), batch_size=2, num_workers=2))
    assert [[x.tolist() for x in b] for b in ours] == [[x.tolist() for x in b] for b in theirs]
    assert {int(w) for b in ours for w in b[0]} == {0, 1}


def test_subscriptable():
    assert typing.get_origin(DataLoader[int]) is DataLoader
    assert typing.get_args(DataLoader[int]) == typing.get_args(tud.DataLoader[int]) == (int,)


# --------------------------------------------------------------------- persistent workers ---
def test_persistent_workers_resume_each_epoch_and_after_a_break():
    loader = DataLoader(Pids(), batch_size=4, num_workers=2, persistent_workers=True)
    epoch1 = list(loader)
    pids = {int(p) for b in epoch1 for p in b[0]}
    it = iter(loader)
    next(it)
    next(it)  # broken off mid-epoch: its in-flight results must not leak into the next one
    epoch2 = list(loader)
    assert [b[1].tolist() for b in epoch2] == [b[1].tolist() for b in epoch1]
    assert {int(p) for b in epoch2 for p in b[0]} == pids  # the same workers
    del loader, it


def test_persistent_iterable_epochs():
    loader = DataLoader(Shards((2, 3)), batch_size=2, num_workers=2, persistent_workers=True)
    first = _values(loader)
    assert (
        _values(loader)
        == first
        == _values(tud.DataLoader(Shards((2, 3)), batch_size=2, num_workers=2))
    )
    del loader


# --------------------------------------------------------------------- errors in turn --------
def test_dataset_errors_arrive_in_turn_and_iteration_continues():
    # torch's test_error_workers: every item raises; 41 items, bs 2 -> 21 errors, then the end.
    it = iter(DataLoader(Squares(41, raise_at=tuple(range(41))), batch_size=2, num_workers=2))
    messages = []
    while True:
        try:
            next(it)
        except StopIteration:
            break
        except ValueError as e:
            messages.append(str(e))
    assert len(messages) == 21
    assert all("in DataLoader worker process" in m for m in messages)
    assert all("Traceback" in m and "bad item" in m for m in messages)


def test_error_carries_worker_id_and_keeps_order():
    it = iter(DataLoader(Squares(8, raise_at=(5,)), batch_size=1, num_workers=2))
    got = []
    for _ in range(8):
        try:
            got.append(int(next(it)[0][0]))
        except ValueError as e:
            got.append(str(e).splitlines()[0])
    assert got[:5] == [0, 1, 2, 3, 4]
    assert got[5] == "Caught ValueError in DataLoader worker process 1."
    assert got[6:] == [6, 7]


def _outcomes(loader) -> list:
    it, out = iter(loader), []
    while True:  # to StopIteration, so torch's iterator shuts down now, not at gc (5 s joins)
        try:
            out.append(int(next(it)[0][0]))
        except StopIteration:
            return out
        except Exception as e:
            out.append(type(e).__name__ if "init failed" not in str(e) else "init failed")


def test_worker_init_fn_error_arrives_in_turn_like_torch():
    # torch: the error is the worker's first result; that worker has no fetcher afterwards, so
    # its later tasks raise too, while the other worker's batches are handed out.
    kwargs = {"batch_size": 1, "num_workers": 2, "worker_init_fn": failing_init}
    ours = _outcomes(DataLoader(Squares(6), **kwargs))
    theirs = _outcomes(tud.DataLoader(Squares(6), **kwargs))
    assert ours[0::2] == theirs[0::2] == [0, 2, 4]
    assert ours[1] == theirs[1] == "init failed"
    assert all(isinstance(x, str) for x in ours[3::2] + theirs[3::2])


def test_collate_error_arrives_in_turn():
    it = iter(DataLoader(Squares(8), batch_size=2, num_workers=2, collate_fn=failing_collate))
    next(it)
    next(it)
    with pytest.raises(KeyError, match="collate refuses 4"):
        next(it)
    assert len(list(it)) == 1


def test_unpicklable_batch_raises_in_its_turn():
    """torch loses such a batch in its queue's feeder thread and waits for it forever."""
    it = iter(DataLoader(Locks(6, bad=3), batch_size=None, num_workers=2))
    got = []
    for _ in range(6):
        try:
            got.append(next(it))
        except TypeError as e:
            got.append(str(e).splitlines()[0])
    assert got == [0, 1, 2, "Caught UnpicklableBatchError in DataLoader worker process 1.", 4, 5]
    with pytest.raises(StopIteration):
        next(it)


# --------------------------------------------------------------------- faults ----------------
def test_killed_worker_raises_naming_pid_and_signal_then_fail_stop():
    it = iter(DataLoader(Squares(10**6), batch_size=2, num_workers=2))
    next(it)
    victim = it._workers[1].pid
    os.kill(victim, signal.SIGKILL)

    def drain(iterator) -> None:
        for _ in range(10**6):
            next(iterator)

    with pytest.raises(RuntimeError) as err:
        drain(it)
    assert str(victim) in str(err.value)
    assert "Killed" in str(err.value)
    for _ in range(3):  # every later next() raises at once, never hands out or hangs
        with pytest.raises(RuntimeError, match="exited unexpectedly"):
            next(it)
    # Workers terminated after the failure are reaped when the iterator goes, at the latest
    # (the tracebacks kept by pytest.raises refer to it, hence gc).
    del err, it
    gc.collect()
    assert not _children()


def test_timeout_raises_torch_message_and_cleans_up():
    it = iter(DataLoader(Squares(8, hang_at=(0,)), batch_size=1, num_workers=2, timeout=0.2))
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.2 seconds"):
        next(it)
    with pytest.raises(RuntimeError, match="timed out"):
        next(it)
    del it
    gc.collect()  # the tracebacks above refer to the iterator
    assert not _children()


def test_a_death_at_the_deadline_is_reported_not_the_timeout(monkeypatch):
    """The race of a worker dying as the wait runs out, made deterministic: the death is there
    when the deadline is found passed (the wait is made to run out at once), and the error is
    the death's, as the spec's MainTimeout guard says (a death the loader can see wins)."""
    it = iter(DataLoader(Squares(8, hang_at=(0,)), batch_size=1, num_workers=2, timeout=30))
    victim = it._workers[1].pid
    os.kill(victim, signal.SIGKILL)
    os.waitid(os.P_PID, victim, os.WEXITED | os.WNOWAIT)  # dead, not reaped: nothing read yet
    ran_out = TimedOut(30.0)
    monkeypatch.setattr(it, "_next_event", lambda deadline: ran_out)
    with pytest.raises(RuntimeError, match=rf"pid {victim}\) is killed by signal"):
        next(it)
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        next(it)
    del it
    gc.collect()


@pytest.mark.parametrize("pin", [False, True])
def test_a_result_that_cannot_be_read_fails_stop(pin, monkeypatch):
    """Item 2 pickles in the worker but not back here: without a pin thread the main process's
    read fails (FaultRecvError), with one the pin thread dies on it (FaultPinDeath) and the main
    process learns of it at once (MainDetectPinFailure). Either way next() raises a clear error
    and every later next() raises it again (torch: raises, then waits for the lost batch)."""
    if pin:
        monkeypatch.setenv("LOADERSPEC_FORCE_PIN_THREAD", "1")
    data = faultinject.FaultyDataset(6, (Unloadable(2),))
    loader = DataLoader(
        data, batch_size=1, num_workers=2, pin_memory=pin, collate_fn=faultinject.collate()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "no accelerator" warning
        it = iter(loader)

    def until_it_raises(iterator: typing.Iterator[torch.Tensor]) -> None:
        for _ in range(3):  # the read of item 2 may come while task 0 or 1 is waited for
            got.append(int(next(iterator)[0]))

    got: list[int] = []
    want = "Pin memory thread exited unexpectedly" if pin else "could not read a result of worker 0"
    with pytest.raises(RuntimeError, match=want) as err:
        until_it_raises(it)
    assert got == [0, 1][: len(got)]
    assert "UnloadableError" in str(err.value)
    with pytest.raises(RuntimeError, match=want):
        next(it)
    del it, err
    gc.collect()


def _resources() -> tuple[int, int]:
    return threading.active_count(), len(os.listdir("/proc/self/fd"))


def _shm_of(pids: list[int]) -> list[str]:
    """/dev/shm entries named after one of ``pids`` (torch's are ``torch_<pid>_...``); other
    jobs on this machine create their own, so only ours are looked at."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names if any(f"_{pid}_" in n or n.endswith(f"_{pid}") for pid in pids)]


@pytest.mark.parametrize("how", ["del", "break", "exception", "loader_dropped"])
def test_shutdown_with_a_stuck_worker_leaves_nothing(how):
    threads, fds = _resources()
    # Worker 1 hangs in its second task (item 3); items 0 and 1 can still be handed out.
    hanging = multiprocessing.get_context("fork").Event()
    ds = Squares(16, hang_at=(3,), hanging=hanging)
    loader = DataLoader(ds, batch_size=1, num_workers=2, multiprocessing_context="fork")
    it = iter(loader)
    assert int(next(it)[0][0]) == 0
    assert hanging.wait(timeout=30)  # worker 1 is stuck inside item 3 now
    pids = [w.pid for w in it._workers]
    if how == "del":
        del it
    elif how == "break":
        for _ in it:
            break
        del it
    elif how == "exception":

        def loop_body_raises() -> None:
            for _ in it:
                raise ZeroDivisionError

        with pytest.raises(ZeroDivisionError):
            loop_body_raises()
        del it
    else:
        del loader, it
    gc.collect()
    assert not [p for p in pids if psutil.pid_exists(p)]  # reaped: no zombie either
    assert _resources() == (threads, fds)
    assert not _shm_of([os.getpid(), *pids])


def test_end_of_epoch_leaves_nothing():
    threads, fds = _resources()
    assert len(list(DataLoader(Squares(10), batch_size=2, num_workers=2))) == 5
    gc.collect()
    assert _resources() == (threads, fds)
    assert not _children()


def test_workers_stay_readable_after_the_epoch_as_torchs_do():
    """torch never closes its worker ``Process`` objects; code written against it (torch's own
    test_dataloader.py) reads ``it._workers`` after the epoch ended: pid, join, is_alive. Their
    pipes are closed all the same (nothing left while the iterator is still held)."""
    threads, fds = _resources()
    it = iter(DataLoader(Squares(10), batch_size=2, num_workers=2))
    assert len(list(it)) == 5
    for w in it._workers:
        w.join(1.0)
        assert not w.is_alive()
        assert (w.exitcode, w.pid > 0) == (0, True)
    assert _resources() == (threads, fds)
    del it


_ORPHAN_SCRIPT = """
import sys, threading, reference
sys.path.insert(0, ".")
from refshell_datasets import Busy
iters = []
def start(busy_at):
    it = iter(reference.DataLoader(Busy(64, busy_at=busy_at), batch_size=1, num_workers=2))
    next(it)
    iters.append(it)
start(1)  # busy: worker 1 spins inside __getitem__
start(2)  # blocked: worker 0 spins, worker 1 blocks writing 4 MiB items nobody reads
# Started from a thread that has ended: PR_SET_PDEATHSIG would follow that thread, so the
# watchdog (pidfd) must act, and the workers must still be alive now.
t = threading.Thread(target=start, args=(1,))
t.start()
t.join()
print(" ".join(str(w.pid) for it in iters for w in it._workers), flush=True)
sys.stdin.read()
"""


def test_parent_sigkill_leaves_no_orphan():
    """Three iterators in one parent (one torch import): busy, blocked, and started in a thread
    that has ended. After the parent's SIGKILL every one of their workers must go."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent,
    )
    try:
        line = proc.stdout.readline()
        workers = [psutil.Process(int(p)) for p in line.split()]
        assert len(workers) == 6
        assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    _gone, alive = psutil.wait_procs(workers, timeout=10)
    for p in alive:
        p.kill()
    scenario = ["busy", "busy", "blocked", "blocked", "thread", "thread"]
    assert not alive, f"orphaned: {[(p.pid, scenario[workers.index(p)]) for p in alive]}"


# --------------------------------------------------------------------- fds -------------------
def test_fd_exhaustion_gives_torch_error_not_a_hang():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 3, hard))  # not enough for 2 workers
    try:
        with pytest.raises(RuntimeError, match="Too many open files"):
            iter(DataLoader(Squares(8), num_workers=2))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --------------------------------------------------------------------- constructor -----------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": -1},
        {"timeout": -1},
        {"prefetch_factor": 2},
        {"num_workers": 1, "prefetch_factor": -1},
        {"persistent_workers": True},
        {"shuffle": True, "sampler": [0, 1]},
        {"batch_sampler": [[0]], "batch_size": 2},
        {"batch_size": None, "drop_last": True},
        {"multiprocessing_context": "spawn"},
        {"num_workers": 1, "multiprocessing_context": "nope"},
        {"num_workers": 1, "multiprocessing_context": 3},
    ],
)
def test_constructor_errors_equal_torchs(kwargs):
    with pytest.raises(Exception) as theirs:
        tud.DataLoader(Squares(4), **kwargs)
    with pytest.raises(Exception) as ours:
        DataLoader(Squares(4), **kwargs)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


@pytest.mark.parametrize("kwargs", [{"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}])
def test_iterable_constructor_errors_equal_torchs(kwargs):
    with pytest.raises(ValueError) as theirs:
        tud.DataLoader(Shards((1,)), **kwargs)
    with pytest.raises(ValueError) as ours:
        DataLoader(Shards((1,)), **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_frozen_attributes_equal_torch():
    with pytest.raises(ValueError, match="batch_size attribute should not be set after DataLoader"):
        DataLoader(Squares(4)).batch_size = 3


def test_pin_memory_without_accelerator_warns_like_torch():
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is present")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _values(DataLoader(Squares(4), batch_size=2, num_workers=2, pin_memory=True))
    assert got == _values(tud.DataLoader(Squares(4), batch_size=2))
    assert any("no accelerator is found" in str(w.message) for w in caught)


# --------------------------------------------------------------------- tracing ---------------
def test_tracing_off_writes_nothing(tmp_path):
    def run() -> None:
        assert _values(DataLoader(Squares(4), batch_size=2, num_workers=2)) == [
            [[0, 0], [1, 1]],
            [[2, 4], [3, 9]],
        ]

    with tracewriter.trace_to(tmp_path):  # on, into tmp_path: every process writes there
        run()
    assert len(list(tmp_path.glob("trace-*.jsonl"))) == 3
    for f in tmp_path.iterdir():
        f.unlink()
    assert not tracewriter.ENABLED  # off again (and the environment variable gone with it)
    run()
    assert not list(tmp_path.iterdir())


def test_trace_records_per_process_put_before_get(tmp_path):
    with tracewriter.trace_to(tmp_path):
        assert tracewriter.ENABLED
        got = _values(DataLoader(Squares(6), batch_size=2, num_workers=2))
    assert not tracewriter.ENABLED
    assert len(got) == 3
    files = sorted(tmp_path.glob("trace-*.jsonl"))
    assert len(files) == 3  # the main process and two workers
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    records.sort(key=lambda r: r["t"])
    keys = {"t", "pid", "actor", "action", "epoch", "worker", "task", "state"}
    assert all(keys <= r.keys() for r in records)
    configs = [r for r in records if r["action"] == "Config"]
    assert len(configs) == 1
    assert sorted(configs[0]["config"]["worker_pids"]) == sorted(
        {r["pid"] for r in records if r["actor"] == "Worker"}
    )
    main = [r for r in records if r["actor"] == "Main" and r["action"] != "Config"]
    assert list(main[0]["state"]) == list(MAIN_STATE_FIELDS)
    for task in range(3):
        order = [
            r["action"]
            for r in records
            if r["task"] == task
            and r["action"]
            in ("MainTryPutIndex", "WorkerFetch", "WorkerPut", "MainGetData", "MainProcessData")
        ]
        assert order == [
            "MainTryPutIndex",
            "WorkerFetch",
            "WorkerPut",
            "MainGetData",
            "MainProcessData",
        ], order
    actions = [r["action"] for r in main]
    assert actions[-1] in ("MainJoinWorker", "MainTerminateWorker")
    assert "MainSetWorkersDone" in actions
    assert "MainStopIteration" in actions


def test_worker_fetch_is_timed_when_the_index_arrives(tmp_path):
    """docs/contracts.md: WorkerFetch's ``t`` is taken when the index is received, before the
    fetch runs, though the record is written after it (it carries the kind)."""
    cost_s = 0.05
    with tracewriter.trace_to(tmp_path):
        got = _values(DataLoader(Slow(4, cost_s), batch_size=1, num_workers=2))
    assert got == [[[i]] for i in range(4)]
    records = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    by = {(r["action"], r["task"]): r["t"] for r in records}
    for task in range(4):
        assert by[("MainTryPutIndex", task)] <= by[("WorkerFetch", task)]
        assert by[("WorkerPut", task)] - by[("WorkerFetch", task)] >= cost_s * 1e9


def test_trace_of_a_stuck_shutdown_terminates_only_the_stuck_worker(tmp_path):
    hanging = multiprocessing.get_context("fork").Event()
    with tracewriter.trace_to(tmp_path):
        ds = Squares(16, hang_at=(3,), hanging=hanging)
        it = iter(DataLoader(ds, batch_size=1, num_workers=2, multiprocessing_context="fork"))
        next(it)
        next(it)
        assert hanging.wait(timeout=30)  # worker 1 is inside item 3 now
        stuck = it._workers[1].pid
        del it
        gc.collect()
    records = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    records.sort(key=lambda r: r["t"])
    ends = [(r["action"], r["worker"]) for r in records if r["action"].startswith("MainJoin")]
    ends += [(r["action"], r["worker"]) for r in records if r["action"] == "MainTerminateWorker"]
    assert sorted(ends) == [
        ("MainJoinWorker", 0),
        ("MainJoinWorker", 1),
        ("MainTerminateWorker", 1),
    ]
    exits = {r["pid"] for r in records if r["action"] == "WorkerExit"}
    assert stuck not in exits
    main = [r["action"] for r in records if r["actor"] == "Main"]
    shutdown = main[main.index("MainDropIterator") :]
    assert shutdown[:4] == [
        "MainDropIterator",
        "MainSetWorkersDone",
        "MainPutSentinel",
        "MainPutSentinel",
    ]


def test_forced_pin_thread_exits_before_workers_are_told(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERSPEC_FORCE_PIN_THREAD", "1")
    threads = threading.active_count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "no accelerator" warning
        with tracewriter.trace_to(tmp_path):
            got = _values(DataLoader(Squares(6), batch_size=2, num_workers=2, pin_memory=True))
    assert got == _values(tud.DataLoader(Squares(6), batch_size=2))
    assert threading.active_count() == threads
    records = [json.loads(x) for f in tmp_path.glob("*.jsonl") for x in f.read_text().splitlines()]
    records.sort(key=lambda r: r["t"])
    actions = [r["action"] for r in records]
    assert actions.count("PinPutData") == 3
    assert next(r for r in records if r["action"] == "Config")["config"]["pin_memory"] is True
    order = [a for a in actions if a in ("MainSetPinDone", "PinExit", "MainJoinPinThread")]
    assert order == ["MainSetPinDone", "PinExit", "MainJoinPinThread"]
    assert actions.index("MainJoinPinThread") < actions.index("MainSetWorkersDone")
    assert actions.index("MainSetWorkersDone") < actions.index("MainPutSentinel")


def test_public_api():
    from loaderspec import reference

    assert reference.__all__ == ["DataLoader", "get_worker_info"]
    assert reference.get_worker_info is tud.get_worker_info
    assert reference.get_worker_info() is None  # the main process
