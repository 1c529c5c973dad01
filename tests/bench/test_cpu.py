"""bench.cpu: the one CPU-per-batch method (the throughput and stages sections both use it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter, so that its descendants are only the ones it starts (pytest's
# own process may have others). A child spins for argv[1] s of its own CPU, then waits for
# its stdin to close.
_SCENARIO = r"""
import json, subprocess, sys, time
from bench.cpu import CpuWindow

SPIN = (
    "import sys, time\n"
    "end = time.process_time() + float(sys.argv[1])\n"
    "while time.process_time() < end: pass\n"
    "print('spun', flush=True)\n"
    "sys.stdin.read()\n"
)

def child(spin_s):
    return subprocess.Popen([sys.executable, "-c", SPIN, str(spin_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)

before, stays = child(0.05), child(0.2)
before.stdout.readline()
stays.stdout.readline()  # spun 0.2 s before the window opens: not in it
window = CpuWindow()
window.start()
late = child(0.1)  # starts and spins inside the window
late.stdout.readline()
end = time.process_time() + 0.05
while time.process_time() < end:  # this process's own CPU
    pass
before.communicate("")  # ends inside the window: its CPU since start is lost
used = window.stop()
late.communicate("")
stays.communicate("")
print(json.dumps(used))
"""


def test_the_window_counts_this_process_and_live_children_and_flags_one_lost():
    """Only the CPU inside the window counts: a child's spin before ``start`` is left out, one
    started inside it counts whole, one that ends inside it is flagged, not counted as 0."""
    proc = subprocess.run(
        [sys.executable, "-c", _SCENARIO],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    used = json.loads(proc.stdout.splitlines()[-1])
    assert used["main_s"] >= 0.05
    # the late child (its 0.1 s and its start-up), not the 0.2 s that stays spun before
    assert 0.1 <= used["workers_s"] < 0.2
    assert used["workers_lost"] == 1
    assert used["workers"] == 3
