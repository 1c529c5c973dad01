"""One Ray runtime for a whole suite run, joined by every loader process (the Ray Data adapter).

Ray cannot be forked once a process has called `ray.init` (its core worker's threads and gRPC
channels do not survive a fork), and starting a local Ray cluster takes seconds and nine
processes (12.1 s on the shared 2-core machine at load, 2.3 s idle; 2026-11-28). The suite plays
every scenario in a process of its own (`faultinject.sandbox`, forked from the harness), so each
scenario starting its own cluster would put a loader's suite far past its 5 minutes, and the
cluster's processes would read as the loader's leak. Instead:

* the first loader process that needs Ray starts a *runtime*: `python -m` this module, which
  detaches (a new session; its launcher exits at once, so it is no descendant of the loader's
  process) and runs `ray.init(num_cpus=2, include_dashboard=False)`; Ray starts its GCS, raylet
  and workers as the runtime's children, which die with it (Ray's fate sharing);
* the runtime belongs to an *owner*: the parent of the caller's session leader (under the suite,
  the harness that forks every scenario's sandbox child, which leads its own session; ranks are
  in that session too). It waits for the owner's exit (a pidfd, bounded by `MAX_LIFE_S`), then
  calls `ray.shutdown()` and removes its folder;
* every loader process joins it with `ray.init(address=...)` (0.04 s, measured), with the
  user's token (`auth_env`: Ray 2.60 starts a local cluster with token authentication, and a
  joining driver must have the token before it imports Ray);
* what joins are found in `<tmp>/loaderspec-ray-<owner pid>/`: `address` (written when the
  cluster is up), `pid` (the runtime's), `log`, and `lock` (flock: concurrent ranks start one
  runtime).

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
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["auth_env", "connect", "folder", "owner"]

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
def _locked(where: Path) -> Iterator[None]:
    where.mkdir(mode=0o700, exist_ok=True)
    with open(where / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while a runtime starts: bounded by START_S
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _running(where: Path) -> str | None:
    """The address of a live runtime in `where`, or None."""
    try:
        pid = int((where / "pid").read_text())
        address = (where / "address").read_text().strip()
    except (OSError, ValueError):
        return None
    return address if address and _alive(pid) else None


def _start(where: Path, owner_pid: int) -> str:
    """Start a runtime for `owner_pid` and return its address once its cluster is up.

    Raises:
        RuntimeError: it did not come up within `START_S` (its log's tail is in the message).
    """
    for stale in ("address", "pid"):
        (where / stale).unlink(missing_ok=True)
    read, write = os.pipe()
    with open(where / "log", "ab") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-m", __name__, str(owner_pid), str(where), str(write)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(write,),
            start_new_session=True,
        )
    os.close(write)
    try:
        launcher.wait(START_S)  # it forks the runtime and exits at once
        ready, _, _ = select.select([read], [], [], START_S)
        line = os.read(read, 4096).decode() if ready else ""
    finally:
        os.close(read)
    if not line.strip():
        tail = (where / "log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the Ray runtime did not start within {START_S:.0f} s: {tail}")
    return line.strip()


def connect() -> None:
    """Join this process to its owner's Ray runtime, starting the runtime if there is none
    (idempotent: a process that joined already returns at once)."""
    import ray

    if ray.is_initialized():
        return
    owner_pid = owner()
    where = folder(owner_pid)
    with _locked(where):
        address = _running(where) or _start(where, owner_pid)
        # Joined one at a time: drivers of one runtime joining at once (the suite's ranks) had
        # one of them abort in Ray's core worker, `Check failed: WarmupStore() ... Seal() called
        # on an object without a reference to it` (3 of 6 three-rank runs, 2026-11-28).
        ray.init(address=address, log_to_driver=False, configure_logging=False)


def _serve(owner_pid: int, where: Path, ready_fd: int) -> None:
    """The runtime: bring the cluster up, say so on `ready_fd`, live until the owner exits."""
    auth_env()
    import ray

    context = ray.init(
        num_cpus=NUM_CPUS,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    address = context.address_info["address"]
    _warm_up()
    (where / "pid").write_text(str(os.getpid()))
    (where / "address").write_text(address)
    os.write(ready_fd, f"{address}\n".encode())
    os.close(ready_fd)
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
    parser.add_argument("ready_fd", type=int, help="where the address is written when up")
    args = parser.parse_args(argv)
    if os.fork() != 0:  # the launcher: its caller reaps it at once, the runtime goes on alone
        os._exit(0)
    _serve(args.owner, args.folder, args.ready_fd)


if __name__ == "__main__":
    main()
