"""The sandbox runs a target in its own session, reports what it left behind, and reaps it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import fi_sandbox_targets as T
import psutil
import pytest
from loaderspec.faultinject import limits, sandbox
from loaderspec.faultinject.sandbox import SandboxError

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_child_left")]


def gone(pid):
    """Exited and reaped: not even a zombie is left."""
    return not psutil.pid_exists(pid)


def test_target_runs_in_a_fresh_session_and_returns_its_value():
    report = sandbox.run(T.ids, deadline_s=10)
    pid, sid, ppid = report.value
    assert report.outcome == "returned"
    assert (pid, sid, ppid) == (report.pid, report.pid, os.getpid())
    assert report.clean, report.leftovers()
    assert report.error is None
    assert report.exit_code == 0
    assert gone(pid)


def test_a_raising_target_reports_the_traceback():
    report = sandbox.run(T.boom, "it went wrong", deadline_s=10)
    assert report.outcome == "raised"
    assert "ValueError: it went wrong" in report.error
    assert report.value is None


def test_a_child_that_exits_without_a_result_is_raised_with_its_status():
    report = sandbox.run(T.exit_without_result, 3, deadline_s=10)
    assert (report.outcome, report.exit_code) == ("raised", 3)
    assert "status 3" in report.error


def test_a_sleeping_grandchild_is_reported_as_a_leftover_orphan_and_reaped():
    report = sandbox.run(T.leak_sleeping_grandchild, deadline_s=10, orphan_grace_s=0.2)
    grandchild = report.value
    assert report.outcome == "returned"
    assert report.leftover_pids == [grandchild]
    assert report.orphans == [grandchild]
    assert report.orphan_exit_s == {grandchild: None}
    assert not report.clean
    assert gone(grandchild)


def test_a_leftover_is_named_so_that_a_leak_can_be_told_from_a_flake():
    """Each process left behind is named: the k-th process the loader's process started (a
    worker), its parent, when it started, its command line; a pid the run never had is none of
    its workers."""
    report = sandbox.run(T.orphans_then_kill_self, deadline_s=10, orphan_grace_s=0.5)
    [survivor] = report.leftover_pids
    name = report.name(survivor)
    assert name.startswith(f"pid {survivor}: worker 1 of this loader (process 2 of 2 it started)")
    assert f"parent {report.pid};" in name
    assert " s after the loader's process); command: " in name
    assert "UTC" in name
    assert set(report.named) >= {survivor}
    assert "never seen" in report.name(1)


def test_an_unreaped_zombie_is_reported_and_reaped():
    report = sandbox.run(T.leak_zombie, deadline_s=10)
    assert report.zombies == [report.value]
    assert report.leftover_pids == []
    assert gone(report.value)


def test_leaked_fds_and_threads_are_measured_in_the_child():
    report = sandbox.run(T.leak_fd_and_thread, deadline_s=10)
    r, w = report.value.split(",")
    assert sorted(f.split(" ->")[0] for f in report.leaked_fds) == sorted([r, w])
    assert all("pipe:" in f for f in report.leaked_fds)
    assert report.leaked_threads == ["leaked-by-target"]


def test_leaked_shm_is_attributed_by_pid_and_removed(tmp_path):
    suffix = f"fi{os.getpid()}x{tmp_path.name}"
    report = sandbox.run(T.leak_shm, suffix, deadline_s=10)
    mine, other = report.value
    try:
        # Other processes on the machine may create /dev/shm entries meanwhile: not ours.
        assert mine in report.leaked_shm
        assert other in report.unattributed_shm
        assert other not in report.leaked_shm
        assert not os.path.exists(f"/dev/shm/{mine}")
        assert os.path.exists(f"/dev/shm/{other}")  # not ours to remove: no pid token in its name
    finally:
        os.unlink(f"/dev/shm/{other}")


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_segment_of_a_process_too_brief_to_sample_is_attributed(tmp_path, start):
    """Each forked process announces its pid at the fork: a worker that leaves a segment and
    dies within one look of the harness (50 ms) still leaks as the run's, not someone else's."""
    suffix = f"fi{os.getpid()}y{tmp_path.name}"
    report = sandbox.run(T.leak_shm_from_brief_children, suffix, 5, deadline_s=30, start=start)
    names = report.value or []
    try:
        assert len(names) == 5, report.error
        assert set(names) <= set(report.leaked_shm), (report.leaked_shm, report.unattributed_shm)
        assert not any(os.path.exists(f"/dev/shm/{n}") for n in names)  # removed as the run's
    finally:
        for n in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm/{n}")


def test_a_fork_does_not_announce_itself_on_an_fd_the_target_reused():
    report = sandbox.run(T.fork_after_reusing_the_announcement_fd, deadline_s=30)
    assert report.value == b"", report.error


def test_a_segment_without_a_pid_in_its_name_is_attributed_by_who_maps_it(tmp_path):
    name = f"psm_fi{tmp_path.name}"[:30]
    report = sandbox.run(T.leak_mapped_shm, name, deadline_s=10, linger_s=1.0)
    try:
        assert report.value == name
        assert name in report.leaked_shm, (report.leaked_shm, report.unattributed_shm)
        assert not os.path.exists(f"/dev/shm/{name}")  # removed as the run's
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{name}")


def test_the_resource_tracker_a_target_starts_is_no_leak():
    """multiprocessing's resource tracker serves the whole process (SPDL's SharedMemory starts
    it): neither it nor the pipe to it is the target's leak."""
    report = sandbox.run(T.use_shared_memory_once, deadline_s=10, linger_s=0.5)
    assert report.outcome == "returned", report.error
    assert report.clean, report.leftovers()


def test_a_resource_tracker_outliving_its_loader_cleans_up_before_it_is_killed(tmp_path):
    """The loader's process dies and leaves a spawn worker and the resource tracker behind:
    the leftovers are killed first, so the tracker still unlinks the semaphores it tracks. A
    spawned child, so that the tracker is its own (a forked one shares this process's)."""
    names_file = tmp_path / "names"
    report = sandbox.run(
        T.spawn_locks_then_kill_self, 5, str(names_file), deadline_s=30, start="spawn"
    )
    assert report.outcome == "killed"
    assert report.helpers, "the resource tracker was expected to outlive the loader"
    names = names_file.read_text().split()
    assert len(names) == 5
    assert [n for n in names if os.path.exists(f"/dev/shm/sem.{n}")] == []
    assert all(gone(pid) for pid in report.leftover_pids)


def test_a_target_past_its_deadline_is_killed_with_its_session():
    report = sandbox.run(T.sleep_forever_with_grandchild, deadline_s=0.5)
    assert report.outcome == "deadline"
    assert 0.5 <= report.elapsed_s < 5
    [grandchild] = report.leftover_pids
    assert gone(grandchild)
    assert gone(report.pid)


def test_a_target_without_a_first_note_ends_at_first_note_s():
    """`first_note_s` bounds the wait for the target's first note, not the run: a silent target
    ends there as past its deadline; one that noted at once runs on past it."""
    silent = sandbox.run(T.silent_for, 30.0, deadline_s=30, first_note_s=0.5)
    assert silent.outcome == "deadline"
    assert silent.elapsed_s < 5
    noted = sandbox.run(T.note_then_wait, 1.0, deadline_s=30, first_note_s=0.5)
    assert (noted.outcome, noted.value, noted.notes) == ("returned", "done", ["started"])


def test_kill_self_times_each_orphan_and_reaps_the_survivor():
    report = sandbox.run(T.orphans_then_kill_self, deadline_s=10, orphan_grace_s=0.5)
    assert report.outcome == "killed"
    assert report.killed_by_signal == signal.SIGKILL
    assert len(report.orphan_exit_s) == 2
    times = sorted(report.orphan_exit_s.values(), key=lambda t: t is None)
    # One grandchild dies with its parent (PDEATHSIG), the other outlives the grace period.
    assert times[0] is not None
    assert times[0] < 0.5
    assert times[1] is None
    [survivor] = report.leftover_pids
    assert report.orphan_exit_s[survivor] is None
    assert survivor in report.orphans
    assert all(gone(pid) for pid in report.orphan_exit_s)


def test_kill_self_outside_a_sandbox_is_refused():
    with pytest.raises(RuntimeError, match="only works inside"):
        sandbox.kill_self()


def test_an_unpicklable_target_is_refused_before_starting_anything():
    with pytest.raises(SandboxError, match="cannot pickle"):
        sandbox.run(lambda: None, deadline_s=1)


@pytest.mark.slow
def test_spawn_runs_a_fresh_interpreter():
    report = sandbox.run(T.ids, deadline_s=30, start="spawn")
    assert report.outcome == "returned"
    assert report.value[0] == report.pid
    assert report.clean, report.leftovers()


def open_many(n):
    """Open /dev/null n times; close them all again; the OSError if one open failed."""
    fds = []
    try:
        for _ in range(n):
            fds.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        return exc
    finally:
        for fd in fds:
            os.close(fd)
    return None


def test_nofile_limits_descriptors_and_restores():
    with limits.nofile(64):
        exc = open_many(100)
    assert isinstance(exc, OSError)
    assert "Too many open files" in str(exc)
    assert open_many(100) is None


def test_small_shm_is_private_to_the_sandbox():
    host_total = os.statvfs("/dev/shm").f_blocks
    report = sandbox.run(T.small_shm_size, 1 << 20, deadline_s=10)
    if report.outcome == "raised" and "Unsupported" in (report.error or ""):
        pytest.skip(report.error.strip().splitlines()[-1])
    assert report.outcome == "returned", report.error
    assert report.value == 1 << 20
    assert os.statvfs("/dev/shm").f_blocks == host_total


def test_the_childs_stderr_is_reported_even_under_pytest_capture():
    report = sandbox.run(T.write_stderr, "hello-from-child", deadline_s=10)
    assert report.outcome == "returned", report.error
    assert "hello-from-child\n" in report.stderr
    assert "RuntimeError: thread says hello-from-child" in report.stderr


def test_sigchld_is_held_back_in_the_block_and_delivered_after_it():
    report = sandbox.run(T.sigchld_held_back, deadline_s=20)
    assert report.outcome == "returned", report.error
    got = report.value
    assert got["calls_in_block"] == 0
    assert got["raised_in_released"] == "a child died"  # before the body: the pending signal
    assert "released_body_ran" not in got
    assert got["calls_after_second_child"] == 1  # held again after released()
    assert got["raised_after_first_block"] == "a child died"
    assert got["calls_in_second_block"] == 2
    assert got["raised_after_block"] == "a child died"
    assert got["calls"] == 3
    assert report.clean, report.leftovers()


def test_kill_self_writes_fault_kill_parent_just_before_the_sigkill(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERSPEC_TRACE_DIR", str(tmp_path))
    t_before = time.monotonic_ns()
    report = sandbox.run(T.kill_self_now, deadline_s=10)
    t_after = time.monotonic_ns()
    assert (report.outcome, report.killed_by_signal) == ("killed", signal.SIGKILL)
    [line] = (tmp_path / f"trace-{report.pid}.jsonl").read_text().splitlines()
    rec = json.loads(line)
    assert {k: rec[k] for k in ("pid", "actor", "action", "worker", "task", "state")} == {
        "pid": report.pid,
        "actor": "Fault",
        "action": "FaultKillParent",
        "worker": None,
        "task": None,
        "state": {},
    }
    assert t_before < rec["t"] < t_after


class _Finalized:
    """Garbage in a reference cycle that says, in a file, which process finalized it."""

    def __init__(self, path):
        self.path = path
        self.me = self

    def __del__(self):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


def test_the_harnesss_garbage_is_not_finalized_in_the_child(tmp_path):
    # A torch iterator caught in a cycle in the harness would, if the child's gc collected its
    # copy, shut down the harness's workers through their shared queues and events.
    import gc

    gc.disable()
    try:
        _Finalized(tmp_path / "del")  # unreachable now, but only gc can free it
        report = sandbox.run(T.ids, deadline_s=10)  # the child runs gc.collect() after its target
        assert report.outcome == "returned", report.error
        assert not (tmp_path / "del").exists()
    finally:
        gc.enable()
    gc.collect()
    assert (tmp_path / "del").read_text() == f"{os.getpid()}\n"


def test_a_sigchld_handler_in_the_harness_runs_after_the_sandbox_is_reaped():
    # torch's handler (installed in the harness by any in-process loader) raises for a
    # registered pid that died by a signal and is unreaped: the sandbox's own dead processes
    # must be reaped before any handler looks.
    from loaderspec.faultinject import processes

    seen: list[list[int]] = []
    old = signal.signal(signal.SIGCHLD, lambda signum, frame: seen.append(processes.zombies()))
    try:
        report = sandbox.run(T.kill_self_now, deadline_s=10)
    finally:
        signal.signal(signal.SIGCHLD, old)
    assert report.outcome == "killed"
    assert seen  # the SIGCHLD was delivered, after the run
    assert all(report.pid not in zombies for zombies in seen)


def test_the_deadline_bounds_the_target_not_the_leak_count_after_it():
    """A target that returned in time is not past its deadline while the sandbox waits for
    what it left (a thread that ends 1.5 s later, deadline 0.5 s, linger 3 s)."""
    report = sandbox.run(T.leave_a_thread_for, 1.5, deadline_s=0.5, linger_s=3.0)
    assert report.outcome == "returned", report.error
    assert report.leaked_threads == []


def test_the_target_may_choose_a_shorter_leak_wait():
    report = sandbox.run(T.leave_a_thread_for, 3.0, 0.1, deadline_s=10, linger_s=5.0)
    assert report.outcome == "returned", report.error
    assert report.leaked_threads == ["ends-later"]
