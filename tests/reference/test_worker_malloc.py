"""The worker's allocator thresholds (reference.worker.settle_malloc): counted in page faults, not
timed. Each check runs in a fresh interpreter set back to glibc's starting thresholds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = """
import ctypes, resource, sys, torch
from loaderspec.reference.worker import settle_malloc
# glibc's starting thresholds (128 KiB), whatever this interpreter freed on its way here: what
# a worker inherited depended on what its parent had freed (and so did a test run's subprocess).
ctypes.CDLL(None).mallopt(-3, 128 << 10)
ctypes.CDLL(None).mallopt(-1, 128 << 10)
if sys.argv[1] == "settled":
    settle_malloc()
def batch():
    items = [torch.full((262144,), 1.0) for _ in range(4)]  # four 1 MiB items, freed together
    del items
batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 20)
"""


def _faults_per_batch(mode: str, **env: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(out.stdout.split()[-1])


_LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only"
)


@_LINUX_ONLY
def test_a_batch_of_big_items_reuses_the_last_ones_memory():
    """Unsettled, glibc trims the heap after each batch of four 1 MiB items and the next one
    faults its pages back in (about 1,000 per batch); settled, the memory is reused."""
    assert _faults_per_batch("default") > 500
    assert _faults_per_batch("settled") < 50


@_LINUX_ONLY
def test_a_users_malloc_settings_rule():
    """A user who set glibc's thresholds through the environment keeps them."""
    assert _faults_per_batch("settled", MALLOC_TRIM_THRESHOLD_="131072") > 500
