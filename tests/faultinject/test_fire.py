"""Where faults may fire: never in the main process, and a Die never in the process that built
the dataset (a thread worker there shares the loader's process); worker info looked up per call."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch.utils.data
from loaderspec.faultinject import _fire
from loaderspec.faultinject.faults import Die, Hang


def test_a_die_stays_out_of_the_process_that_built_the_dataset(monkeypatch):
    assert not _fire.may_fire_here(Die(0), home_pid=os.getpid())  # the main process: no info
    # A thread loader's worker: worker info in a thread of the loader's own process.
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: SimpleNamespace(id=1))
    assert _fire.worker_id() == 1  # looked up now, not bound at import
    assert not _fire.may_fire_here(Die(0), home_pid=os.getpid())
    assert _fire.may_fire_here(Hang(0), home_pid=os.getpid())  # a thread can hang
    assert _fire.may_fire_here(Die(0), home_pid=os.getpid() + 1)  # a worker process


def test_anywhere_means_anywhere():
    assert _fire.may_fire_here(Die(0, anywhere=True), home_pid=os.getpid())


def test_a_worker_without_worker_info_is_known_by_where_it_runs():
    """SPDL's, grain's and torchdata.nodes' workers set no worker info: a fetch in another
    process, or in another thread of the loader's process, is a worker's; the thread that built
    the dataset (torch's single-process path) is not."""
    import threading

    here, me = os.getpid(), threading.get_ident()
    assert _fire.worker_id() is None
    assert not _fire.in_worker(here, me)
    assert not _fire.may_fire_here(Hang(0), here, me)
    assert _fire.in_worker(here + 1, me)
    assert _fire.may_fire_here(Die(0), here + 1, me)  # a worker process without info
    seen: list[bool] = []
    thread = threading.Thread(
        target=lambda: seen.extend(
            [_fire.may_fire_here(Hang(0), here, me), _fire.may_fire_here(Die(0), here, me)]
        )
    )
    thread.start()
    thread.join()
    assert seen == [True, False]  # a thread worker hangs, but never kills the loader's process
