"""One Ray runtime for a whole suite run, joined by every loader process (the Ray Data adapter).

Ray cannot be forked once a process has called `ray.init` (its core worker's threads and gRPC
channels do not survive a fork), and starting a local Ray cluster takes seconds and nine
processes (12.1 s on the shared 2-core machine at load, 2.3 s idle; 2026-11-28). The suite plays
every scenario in a process of its own (`faultinject.sandbox`, forked from the harness), so each
scenario starting its own cluster would put a loader's suite far past its 5 minutes, and the
cluster's processes would read as the loader's leak. Instead:

* a loader's constructor starts a *runtime* (`prestart`) unless one its process would join is
  alive: `python -m` this module, which detaches (a new session; its launcher exits at once, so
  it is no descendant of the caller) and runs `ray.init(num_cpus=2, include_dashboard=False)`;
  Ray starts its GCS, raylet and workers as the runtime's children, which die with it (Ray's
  fate sharing), and returns once it is up, without joining it. The suite's harness builds a
  loader (its constructor check) before any scenario, so the cluster comes up outside every
  scenario's deadline;
* the runtime belongs to an *owner*, the process that started it (the harness); it waits for
  the owner's exit (a pidfd, bounded by `MAX_LIFE_S`), then calls `ray.shutdown()` and removes
  its folder. A loader process joins the runtime of its own owner, the parent of its session
  leader (a scenario's sandbox child leads its session and its parent is the harness; ranks are
  in that session too), or else its own; where there is none, it starts one for its owner
  itself and waits for it;
* every loader process joins it with `ray.init(address=...)` (0.04 s, measured), one at a time,
  with the user's token (`auth_env`: Ray 2.60 starts a local cluster with token
  authentication, and a joining driver must have the token before it imports Ray);
* what joins are found in `<tmp>/loaderspec-ray-<owner pid>/`: `pid` (the runtime's, written
  as it starts), `address` (written when the cluster is up), `log`, and `lock` (flock: a
  starting runtime holds it until its cluster is up, so a process that takes it next finds the
  runtime up; joins take it one at a time).

The runtime's processes are never in a scenario's session or process tree after the launcher
exits, so the sandbox neither counts nor kills them; they are stopped by the runtime itself (by
pid, through Ray's own shutdown), never by name.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["auth_env", "connect", "folder", "owner", "prestart"]

# How long a new runtime may take to bring its cluster up (12 s measured at load 6).
START_S = 120.0
# A runtime whose owner never exits (a pid reused, a wait that never wakes) ends after this.
MAX_LIFE_S = 4 * 3600.0
NUM_CPUS = 2


def owner() -> int:
    """The pid the runtime lives as long as: the parent of this process's session leader (this
    process's parent when it leads its session itself)."""
    leader = os.getsid(0)
    if leader == os.getpid():
        return os.getppid()
    try:
        with open(f"/proc/{leader}/stat") as stat:
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return os.getppid()


def folder(owner_pid: int | None = None) -> Path:
    """Where the runtime of `owner_pid` (default: this process's owner) keeps its files."""
    pid = owner() if owner_pid is None else owner_pid
    return Path(tempfile.gettempdir()) / f"loaderspec-ray-{pid}"


def auth_env() -> None:
    """Make this process's Ray (imported after this call: Ray reads the mode at import) use
    token authentication with this user's token, `<tmp>/loaderspec-ray-<uid>.token` (mode 0600,
    made once): the runtime and every process joining it share it. A mode the user set already
    (`RAY_AUTH_MODE`) is left alone."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = Path(tempfile.gettempdir()) / f"loaderspec-ray-{os.getuid()}.token"
    if not path.exists():
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.")  # mode 0600
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
        scratch = Path(name)
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            os.link(scratch, path)
        scratch.unlink()
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[int]:
    """Hold `where`'s lock (flock) for the block. A runtime launched under it inherits the lock
    and holds it until its cluster is up (or it died), so whoever takes the lock next finds it
    ready: the fd is closed, never unlocked (an unlock would end the runtime's hold too)."""
    where.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(where / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a starting runtime's hold is bounded by START_S
        yield fd
    finally:
        os.close(fd)


def _started(where: Path) -> bool:
    """Whether a runtime of `where` is alive (up, or still starting)."""
    try:
        return _alive(int((where / "pid").read_text()))
    except (OSError, ValueError):
        return False


def _running(where: Path) -> str | None:
    """The address of a live runtime in `where` that is up, or None."""
    try:
        address = (where / "address").read_text().strip()
    except OSError:
        return None
    return address if address and _started(where) else None


def _found() -> Path | None:
    """The folder of the runtime this process joins: its owner's, else its own (a script that
    built a loader: `prestart`), when one is alive."""
    for pid in dict.fromkeys((owner(), os.getpid())):
        if _started(folder(pid)):
            return folder(pid)
    return None


def _launch(where: Path, owner_pid: int, lock: int) -> None:
    """Start a runtime for `owner_pid` in `where`, holding `lock` (taken by the caller) until
    its cluster is up; returns once the runtime has detached."""
    for stale in ("address", "pid"):
        (where / stale).unlink(missing_ok=True)
    with open(where / "log", "ab") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-m", __name__, str(owner_pid), str(where), str(lock)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(lock,),
            start_new_session=True,
        )
    launcher.wait(START_S)  # it forks the runtime and exits at once


def prestart() -> None:
    """Start a runtime owned by this process unless one this process would join is alive, and
    return once it is up, without joining it (the constructor's call: the suite's harness
    builds a loader before any scenario, so the cluster comes up there, outside every
    scenario's deadline; a scenario's process finds it up and returns at once)."""
    where = _found()
    if where is None:
        where = folder(os.getpid())
        with _locked(where) as lock:
            if not _started(where):
                _launch(where, os.getpid(), lock)
    with _locked(where):  # held by a starting runtime until its cluster is up
        pass


def connect() -> None:
    """Join this process to its Ray runtime (`_found`), starting one for its owner if there is
    none, and waiting for one that is starting (idempotent: a process that joined already
    returns at once).

    Raises:
        RuntimeError: the runtime did not come up (its log's tail is in the message).
    """
    import ray

    if ray.is_initialized():
        return
    where = _found()
    if where is None:
        owner_pid = owner()
        where = folder(owner_pid)
        with _locked(where) as lock:
            if not _started(where):
                _launch(where, owner_pid, lock)
    with _locked(where):  # held by a starting runtime until its cluster is up
        address = _running(where)
        if address is None:
            tail = (where / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the Ray runtime in {where} did not start: {tail}")
        # Joined one at a time: drivers of one runtime joining at once (the suite's ranks) had
        # one of them abort in Ray's core worker, `Check failed: WarmupStore() ... Seal() called
        # on an object without a reference to it` (3 of 6 three-rank runs, 2026-11-28).
        ray.init(address=address, log_to_driver=False, configure_logging=False)


def _serve(owner_pid: int, where: Path, lock: int) -> None:
    """The runtime: bring the cluster up holding `lock` (a watchdog ends it after `START_S`),
    release it, then live until the owner exits."""
    (where / "pid").write_text(str(os.getpid()))
    signal.alarm(int(START_S))  # the default action ends this process, and so its hold
    auth_env()
    import ray

    context = ray.init(
        num_cpus=NUM_CPUS,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    _warm_up()
    (where / "address").write_text(context.address_info["address"])
    signal.alarm(0)
    os.close(lock)  # up: the joining processes waiting on the lock go on
    try:
        watch = os.pidfd_open(owner_pid)
    except (OSError, AttributeError):  # the owner is gone already
        watch = None
    if watch is not None and _alive(owner_pid):
        select.select([watch], [], [], MAX_LIFE_S)
    ray.shutdown()
    shutil.rmtree(where, ignore_errors=True)


def _warm_up() -> None:
    """Start what Ray Data keeps for the whole cluster before any loader process joins: its
    detached stats actor (a worker process of its own), made at a first execution and then
    called by every driver's. Made later, the actor came up while the first scenario ran, and
    that driver's two new sockets to it read as the loader's leak (the first case of a run, in
    2 of 4 cold starts measured; 0 of 3 with this)."""
    import ray
    import ray.data
    from ray.data._internal.stats import get_or_create_stats_actor

    for _ in ray.data.range(1).iter_batches(batch_size=1):
        pass
    ray.get(get_or_create_stats_actor().__ray_ready__.remote(), timeout=START_S)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}",
        description="a Ray runtime for the loader processes of one owner (see the module)",
    )
    parser.add_argument("owner", type=int, help="the pid whose exit ends the runtime")
    parser.add_argument("folder", type=Path, help="where the runtime's files go")
    parser.add_argument("lock", type=int, help="the folder's lock, held until the cluster is up")
    args = parser.parse_args(argv)
    if os.fork() != 0:  # the launcher: its caller reaps it at once, the runtime goes on alone
        os._exit(0)
    _serve(args.owner, args.folder, args.lock)


if __name__ == "__main__":
    main()
