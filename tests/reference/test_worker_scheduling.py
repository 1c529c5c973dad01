"""The workers' scheduling policy (reference.worker.yield_to_the_loader): SCHED_BATCH, so that a
woken worker does not preempt the loader's process; a worker_init_fn's own choice wins."""

from __future__ import annotations

import os
import sys

import pytest
from loaderspec.reference import DataLoader
from torch.utils.data import Dataset

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SCHED_BATCH: Linux only"
)


class Policies(Dataset[int]):
    """Each item is the scheduling policy of the process that fetched it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return os.sched_getscheduler(0)


def _back_to_other(worker_id: int) -> None:
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _policies(**kwargs: object) -> set[int]:
    loader = DataLoader(Policies(), batch_size=None, num_workers=2, timeout=60, **kwargs)
    return set(loader)


def test_workers_run_under_sched_batch() -> None:
    # From SCHED_OTHER only: a policy this process was started under (a CI runner's, say) stays.
    inherited = os.sched_getscheduler(0)
    expected = os.SCHED_BATCH if inherited == os.SCHED_OTHER else inherited
    assert _policies() == {expected}


def test_a_worker_init_fn_may_choose_another_policy() -> None:
    assert _policies(worker_init_fn=_back_to_other) == {os.SCHED_OTHER}
