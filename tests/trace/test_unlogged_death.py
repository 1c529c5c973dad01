"""A worker killed by something nobody logs (the OOM killer, a segfault in a C extension): here
it SIGKILLs itself inside ``__getitem__``, with no fault record. The trace spec infers the kill
from the main process's MainDetectWorkerFailure record, so the run is ACCEPTED (issue 11)."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import pytest
from loaderspec.reference import DataLoader

from loaderspec import tracecheck, tracewriter


class SelfKillingDataset:
    """Item ``at`` kills the worker process that fetches it (never the loader's process)."""

    def __init__(self, n: int, at: int) -> None:
        self.n, self.at, self.parent = n, at, os.getpid()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.at and os.getpid() != self.parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


@pytest.mark.slow
def test_a_worker_that_sigkills_itself_unlogged_is_accepted(tmp_path: Path, no_child_left):
    with tracewriter.trace_to(tmp_path):
        it = iter(DataLoader(SelfKillingDataset(8, 3), batch_size=1, num_workers=2))
        got: list[int] = []
        with pytest.raises(RuntimeError, match="exited unexpectedly"):
            got.extend(int(b) for b in it)  # item 3's worker dies: the error ends it
        del it
        gc.collect()
    # How many batches come out first is the schedule's: the death is reported at the first
    # next() after the main process sees it, and under load worker 1 may fetch items 1 and 3 and
    # die before batch 2 (or even 0) has been read. Never item 3, never out of order.
    assert got == list(range(len(got)))
    assert len(got) <= 3
    (run,) = tracecheck.runs_of([tmp_path])
    actions = [r.action for r in run.records]
    assert "MainDetectWorkerFailure" in actions
    assert not any(a.startswith("Fault") for a in actions)  # nobody logged the kill
    (verdict,) = tracecheck.check_runs([run])
    assert verdict.ok, tracecheck.localise(verdict).explain()
