"""Module-level targets for the sandbox tests (a sandbox target must be importable)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import signal
import threading
import time

from loaderspec.faultinject import sandbox

PR_SET_PDEATHSIG = 1


def ids() -> tuple[int, int, int]:
    return os.getpid(), os.getsid(0), os.getppid()


def boom(message: str) -> None:
    raise ValueError(message)


def _fork_sleeper(seconds: float, *, pdeathsig: bool = False) -> int:
    """Fork a grandchild that sleeps `seconds` (optionally dying with its parent)."""
    pid = os.fork()
    if pid == 0:
        try:
            if pdeathsig:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            time.sleep(seconds)
        finally:
            os._exit(0)
    return pid


def leak_sleeping_grandchild() -> int:
    """Start a grandchild that sleeps a minute, and return without waiting for it."""
    return _fork_sleeper(60)


def leak_zombie() -> int:
    """Fork a grandchild that exits at once, and never reap it."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    # Wait (bounded by the sandbox deadline) until it is a zombie, without reaping it.
    stat = pathlib.Path(f"/proc/{pid}/stat")
    while stat.read_text().split(")")[-1].split()[0] != "Z":
        time.sleep(0.001)
    return pid


def leak_shm(name_suffix: str) -> list[str]:
    """Leave two /dev/shm entries: one named with our pid (torch's style), one whose random hex
    token merely contains our pid's digits (Python's `psm_<hex>` style): not a pid."""
    mine = f"torch_{os.getpid()}_{name_suffix}"
    other = f"psm_{os.getpid()}cafe{name_suffix}"
    for name in (mine, other):
        with open(f"/dev/shm/{name}", "wb") as f:
            f.write(b"x" * 4096)
    return [mine, other]


def leak_shm_from_brief_children(name_suffix: str, n: int) -> list[str]:
    """Fork `n` children that each leave a /dev/shm entry named with its pid and exit at once
    (a worker killed at its first batch): far shorter-lived than the harness's sampling."""
    names = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            fd = os.open(f"/dev/shm/torch_{os.getpid()}_{name_suffix}", os.O_CREAT | os.O_WRONLY)
            os.close(fd)
            os._exit(0)
        os.waitpid(pid, 0)
        names.append(f"torch_{pid}_{name_suffix}")
    return names


def fork_after_reusing_the_announcement_fd() -> bytes:
    """Put a pipe of our own on the fd number the child's forks announce themselves on (a
    target that closes fds and opens others), fork, and return what reached our pipe."""
    import fcntl

    # The announcement fd: the one write-only, non-blocking pipe end the child was given.
    wanted = os.O_WRONLY | os.O_NONBLOCK
    pipes = []
    for n in map(int, os.listdir("/proc/self/fd")):
        with contextlib.suppress(OSError):  # listdir's own fd is gone by now
            if os.readlink(f"/proc/self/fd/{n}").startswith("pipe:"):
                pipes.append(n)
    (fd,) = [n for n in pipes if fcntl.fcntl(n, fcntl.F_GETFL) & wanted == wanted]
    r, w = os.pipe()
    os.dup2(w, fd)  # closes the announcement pipe; `fd` is now ours
    os.close(w)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(fd)
    got = os.read(r, 64)  # EOF at once (b""), unless the fork wrote here
    os.close(r)
    return got


_MAPPED: list[object] = []


def leak_mapped_shm(name: str) -> str:
    """Leave a /dev/shm segment whose name has no pid (Python's SharedMemory, as SPDL's), still
    mapped, with a thread that never ends (so the child lingers while the harness looks)."""
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(name=name, create=True, size=4096)
    # A private attribute of SharedMemory: the test leaks the segment on purpose.
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    _MAPPED.append(shm)
    threading.Thread(target=threading.Event().wait, name="holds-the-segment", daemon=True).start()
    return name


def use_shared_memory_once() -> None:
    """Create and remove a SharedMemory segment: multiprocessing starts its resource tracker
    (a process and a pipe to it, kept for the process's life) on the way."""
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=4096)
    shm.close()
    shm.unlink()


def leak_fd_and_thread() -> str:
    """Open a pipe and start a thread, and return with both still there."""
    r, w = os.pipe()
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="leaked-by-target", daemon=True).start()
    return f"{r},{w}"


def sleep_forever_with_grandchild() -> None:
    _fork_sleeper(60)
    time.sleep(60)


def orphans_then_kill_self() -> None:
    """Fork one grandchild that dies with its parent and one that does not; then die."""
    _fork_sleeper(60, pdeathsig=True)
    _fork_sleeper(60)
    sandbox.kill_self()


def spawn_locks_then_kill_self(n: int, names_file: str) -> None:
    """Make `n` spawn-context locks (named semaphores, in the resource tracker's care), start a
    spawn worker that holds the tracker's pipe, write the semaphores' names, then die."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    locks = [ctx.Lock() for _ in range(n)]
    ctx.Process(target=time.sleep, args=(60,)).start()
    # A private attribute of multiprocessing's Lock: the semaphore's name.
    names = [lock._semlock.name.lstrip("/") for lock in locks]  # type: ignore[attr-defined]
    pathlib.Path(names_file).write_text("\n".join(names))
    sandbox.kill_self()


def exit_without_result(code: int) -> None:
    os._exit(code)


def small_shm_size(size: int) -> int:
    import shutil

    from loaderspec.faultinject import limits

    limits.small_shm(size)
    return shutil.disk_usage("/dev/shm").total


def write_stderr(text: str) -> None:
    """Write to stderr directly and through a thread's unhandled exception."""
    import sys

    sys.stderr.write(text + "\n")

    def fail() -> None:
        raise RuntimeError(f"thread says {text}")

    t = threading.Thread(target=fail)
    t.start()
    t.join()


def sigchld_held_back() -> dict[str, object]:
    """A SIGCHLD handler that raises (as torch's does) runs only where the hold lets it: inside
    `released()`, or right after the block; never inside the block."""
    from loaderspec.faultinject import processes

    calls: list[int] = []

    def handler(signum: int, frame: object) -> None:
        calls.append(signum)
        raise RuntimeError("a child died")

    def child_exits() -> int:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        processes.wait_gone([pid], 10)  # exited (a zombie): its SIGCHLD has been sent
        return pid

    signal.signal(signal.SIGCHLD, handler)
    out: dict[str, object] = {}
    pids = []
    try:
        with processes.sigchld_deferred() as held:
            pids.append(child_exits())
            out["calls_in_block"] = len(calls)
            try:
                with held.released():
                    out["released_body_ran"] = True
            except RuntimeError as exc:
                out["raised_in_released"] = str(exc)
            pids.append(child_exits())
            out["calls_after_second_child"] = len(calls)
    except RuntimeError as exc:
        out["raised_after_first_block"] = str(exc)
    try:
        with processes.sigchld_deferred():
            pids.append(child_exits())
            out["calls_in_second_block"] = len(calls)
    except RuntimeError as exc:
        out["raised_after_block"] = str(exc)
    out["calls"] = len(calls)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in pids:
        os.waitpid(pid, 0)
    return out


def kill_self_now() -> None:
    sandbox.kill_self()


def leave_a_thread_for(seconds: float, linger_s: float | None = None) -> None:
    """Return at once, leaving a thread that ends `seconds` later (with `linger_s`, the target's
    own leak wait)."""
    import threading
    import time

    from loaderspec.faultinject import sandbox

    threading.Thread(target=time.sleep, args=(seconds,), name="ends-later").start()
    if linger_s is not None:
        sandbox.set_linger(linger_s)


def silent_for(seconds: float) -> None:
    """Send no note for `seconds`."""
    threading.Event().wait(seconds)


def note_then_wait(seconds: float) -> str:
    """Note at once, then return after `seconds`."""
    sandbox.note("started")
    threading.Event().wait(seconds)
    return "done"
