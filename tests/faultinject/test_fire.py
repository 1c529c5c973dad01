"""Where faults may fire: never in the main process, and a Die never in the process that built
the dataset (a thread worker there shares the loader's process); worker info looked up per call."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch.utils.data

from faultinject import _fire
from faultinject.faults import Die, Hang


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
