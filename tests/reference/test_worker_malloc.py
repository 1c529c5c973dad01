"""The worker's allocator thresholds (reference.worker.settle_malloc): counted in page faults, not
timed. Each check runs in a fresh interpreter, whose allocator has not freed a big block yet."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = """
import resource, sys, torch
from reference.worker import settle_malloc
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


def _unsettled_faults() -> int:
    faults = _faults_per_batch("default")
    if faults < 500:
        pytest.skip(f"this interpreter's allocator already keeps the items ({faults} faults/batch)")
    return faults


@_LINUX_ONLY
def test_a_batch_of_big_items_reuses_the_last_ones_memory():
    """Unsettled, glibc trims the heap after each batch of four 1 MiB items and the next one
    faults its pages back in (about 1,000 per batch); settled, the memory is reused."""
    _unsettled_faults()
    assert _faults_per_batch("settled") < 50


@_LINUX_ONLY
def test_a_users_malloc_settings_rule():
    """A user who set glibc's thresholds through the environment keeps them."""
    _unsettled_faults()
    assert _faults_per_batch("settled", MALLOC_TRIM_THRESHOLD_="131072") > 500
