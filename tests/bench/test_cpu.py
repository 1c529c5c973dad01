"""bench.cpu: the one CPU-per-batch method (the throughput and stages sections both use it)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import CpuWindow

# A child that spins for ``sys.argv[1]`` s of its own CPU, then waits until its stdin closes.
_SPIN = (
    "import sys, time\n"
    "end = time.process_time() + float(sys.argv[1])\n"
    "while time.process_time() < end: pass\n"
    "print('spun', flush=True)\n"
    "sys.stdin.read()\n"
)


def _child(spin_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SPIN, str(spin_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_the_window_counts_this_process_and_live_children_and_flags_one_lost():
    """Only the CPU inside the window counts: a child's spin before ``start`` is left out, one
    started inside it counts whole, one that ends inside it is flagged, not counted as 0."""
    before = _child(0.05)
    stays = _child(0.0)
    try:
        assert before.stdout is not None
        assert stays.stdout is not None
        before.stdout.readline()  # spun before the window opens
        stays.stdout.readline()
        window = CpuWindow()
        window.start()
        late = _child(0.1)  # starts and spins inside the window
        assert late.stdout is not None
        late.stdout.readline()
        end = time.process_time() + 0.05
        while time.process_time() < end:  # this process's own CPU
            pass
        before.communicate("")  # ends inside the window: its CPU since start is lost
        used = window.stop()
        late.communicate("")
    finally:
        for child in (before, stays):
            if child.poll() is None:
                child.kill()
                child.wait()
    assert used["main_s"] >= 0.05
    assert 0.1 <= used["workers_s"] < 0.1 + 0.05 + 0.05  # the late child, not the early spin
    assert used["workers_lost"] == 1
    assert used["workers"] == 3
