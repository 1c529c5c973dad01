"""Fixtures for faultinject's tests: no process left behind by a test."""

from __future__ import annotations

import gc

import psutil
import pytest

from faultinject import processes


def _is_mp_resource_tracker(pid: int) -> bool:
    # multiprocessing starts one resource tracker per process, the first time a spawn or
    # forkserver context is used, and keeps it until exit: not a leak of the test.
    try:
        return "resource_tracker" in " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


@pytest.fixture
def no_leftover_children():
    """Fail a test that leaves a live child of the test process (after one gc pass, so a loader
    iterator caught in a reference cycle gets to shut its workers down); kill it by pid first."""
    before = {p.pid for p in processes.children()}
    yield
    gc.collect()
    left = [pid for pid in processes.new_children(before) if not _is_mp_resource_tracker(pid)]
    if left:
        processes.kill(left, action=None)
        processes.wait_gone(left, 10)
        pytest.fail(f"the test left children behind: {left}")
