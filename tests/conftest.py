"""What every test may use: the check that a test leaves no process behind."""

from __future__ import annotations

import gc

import pytest
from loaderspec.faultinject import processes


@pytest.fixture
def no_child_left():
    """Fail a test that leaves a live child of the test process (after one gc pass, so a loader
    iterator caught in a reference cycle gets to shut its workers down); kill and reap it by pid
    first, so the next test starts clean. multiprocessing's helpers (the resource tracker, the
    fork server) live as long as the test process by design and are not counted."""
    before = {p.pid for p in processes.children()}
    yield
    gc.collect()
    left = [p.pid for p in processes.children(helpers=False) if p.pid not in before]
    if left:
        processes.kill(left, action=None)
        processes.wait_gone(left, 10)
        for pid in left:
            processes.reap(pid)
        pytest.fail(f"the test left children behind: {left}")
