"""faultinject.ranks: a rank group is one sandbox scenario, bounded and reaped like any other."""

from __future__ import annotations

import os
import threading
from typing import Any

import psutil
from loaderspec.faultinject import driver
from loaderspec.faultinject.events import Batch
from loaderspec.faultinject.plan import RankPlan
from loaderspec.reference import DataLoader


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


class HangsOnRankOne(DataLoader):
    """Rank 1's iterator never returns a batch (its next() blocks for ever)."""

    def __iter__(self) -> Any:
        if os.environ.get("RANK") == "1":
            threading.Event().wait()
        return super().__iter__()


def test_a_group_ends_leaving_no_process_and_no_listening_port() -> None:
    plan = RankPlan(world=2, n=8, kwargs={"num_workers": 1, "batch_size": 2}, epochs=2)
    r = driver.run(DataLoader, plan, deadline_s=30)
    assert r.report is not None
    assert r.report.outcome == "returned", r.report
    assert r.report.clean, r.report.leftovers()
    assert r.port is not None
    assert not r.port_listening
    assert [len(r.batches(1, rank=rank)) for rank in range(2)] == [2, 2]


def test_a_hung_rank_is_killed_at_the_deadline_with_the_whole_group() -> None:
    plan = RankPlan(world=2, n=8, kwargs={"num_workers": 1, "batch_size": 2}, epochs=1)
    r = driver.run(HangsOnRankOne, plan, deadline_s=8)
    assert r.report is not None
    assert r.report.outcome == "deadline"
    assert r.report.elapsed_s < 20
    assert r.of(0, Batch, rank=1) == []
    # every rank and worker was in the sandbox's session: killed and reaped by pid
    left = [p.pid for p in psutil.process_iter() if _session(p.pid) == r.report.pid]
    assert left == []
    assert not r.port_listening
