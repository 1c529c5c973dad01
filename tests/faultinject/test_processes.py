"""The process predicates and waits every part of loaderspec uses (one copy each)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from loaderspec.faultinject import processes

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_child_left")]

SLEEPER = [sys.executable, "-c", "import sys; sys.stdin.read()"]
# Writes 1 MiB to a pipe nobody reads: it blocks in the kernel's pipe write.
WRITER = [sys.executable, "-c", "import sys; sys.stdout.buffer.write(bytes(1 << 20))"]


def _popen(cmd: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kw)


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        p.kill()
        p.wait(10)
        for stream in (p.stdin, p.stdout):
            if stream is not None:
                stream.close()


def test_wait_gone_returns_the_survivors_only():
    victim, survivor = _popen(SLEEPER), _popen(SLEEPER)
    try:
        victim.kill()
        assert processes.wait_gone([victim.pid, survivor.pid], timeout_s=0.5) == [survivor.pid]
    finally:
        _stop(victim, survivor)


def test_a_writer_to_a_full_pipe_is_seen_blocked_and_a_reader_is_not():
    writer, reader = _popen(WRITER), _popen(SLEEPER)
    try:
        assert processes.wait_blocked(writer.pid, 10)
        assert not processes.blocked_in_pipe_write(reader.pid)
    finally:
        _stop(writer, reader)


def test_multiprocessings_helpers_are_told_apart_from_workers():
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # the helper spawn and forkserver start; lives till exit
    tracker = [p for p in processes.children() if processes.is_mp_helper(p)]
    worker = _popen(SLEEPER)
    try:
        assert tracker, "no resource tracker among the children"
        assert not processes.is_mp_helper(worker.pid)
        assert worker.pid in [p.pid for p in processes.children(helpers=False)]
        assert not {p.pid for p in tracker} & {p.pid for p in processes.children(helpers=False)}
    finally:
        _stop(worker)


@pytest.mark.parametrize(
    ("cmd", "helper"),
    [
        ("python -c from multiprocessing.resource_tracker import main;main(5)", True),
        ("python -c from multiprocessing.forkserver import main; main(7, 8, None, **{})", True),
        # A worker forked from a pytest run of a start-method case carries its command line: it
        # is the loader's worker, not a helper (else no worker of that run is killed or counted).
        (
            "python -m pytest conformance/cases/test_exactly_once.py::"
            "test_every_start_method_hands_out_every_batch[forkserver] -p no:cacheprovider",
            False,
        ),
        ("python -m pytest -k resource_tracker", False),
    ],
)
def test_only_multiprocessings_own_helper_commands_are_helpers(cmd: str, helper: bool) -> None:
    assert processes.is_mp_helper_command(cmd) is helper
