"""Resource limits for fault scenarios: few file descriptors, a small /dev/shm.

`nofile(n)` lowers RLIMIT_NOFILE's soft limit for the block (children started inside inherit it).
`small_shm(size)` gives this process (and every process it starts afterwards) its own small tmpfs
on /dev/shm, through a private mount namespace; that cannot be undone for the process, so call it
inside a `faultinject.sandbox` target. Where the kernel or the privileges do not allow it, it
raises `Unsupported` with the reason, so a test can skip honestly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["Unsupported", "nofile", "small_shm"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MS_NOSUID = 2
_MS_NODEV = 4


class Unsupported(RuntimeError):
    """This fault cannot be set up here; the message says why."""


@contextmanager
def nofile(n: int) -> Iterator[int]:
    """Lower the soft RLIMIT_NOFILE to `n` for the block, then restore it; yields `n`.

    Raises:
        ValueError: `n` exceeds the hard limit (nothing changed).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and n > hard:
        raise ValueError(f"nofile({n}) exceeds the hard limit {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
    try:
        yield n
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if name is None:
        raise Unsupported("small_shm: no C library found to call unshare/mount")
    return ctypes.CDLL(name, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise Unsupported(f"small_shm: {what} failed: {os.strerror(err)} (errno {err})")


def small_shm(size_bytes: int = 64 << 20, *, mount_point: str = "/dev/shm") -> Path:
    """Mount a fresh `size_bytes` tmpfs on `mount_point` for this process and its future children.

    Irreversible for the calling process: call it at the start of a `sandbox.run` target. The
    host's /dev/shm is untouched (the mount is private to a new mount namespace).

    Raises:
        Unsupported: not Linux, not permitted (no CAP_SYS_ADMIN and no unprivileged user
            namespaces, or a multithreaded non-root caller), or the mount failed. The process may
            then be in a new mount namespace with /dev/shm unchanged.
    """
    if not Path("/proc/self/ns/mnt").exists():
        raise Unsupported("small_shm: needs Linux mount namespaces")
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    else:
        # A user namespace gives us CAP_SYS_ADMIN over our own mount namespace. The kernel allows
        # it only in a single-threaded process; map our ids to themselves, so signals, file
        # ownership and getuid() look the same as before.
        if len(os.listdir("/proc/self/task")) > 1:
            raise Unsupported("small_shm: a non-root caller must be single-threaded (call first)")
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    # Without this, a shared root mount would propagate our tmpfs back to the host.
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making / private")
    opts = f"size={int(size_bytes)},mode=1777".encode()
    _check(
        libc.mount(b"tmpfs", mount_point.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts),
        f"mounting tmpfs on {mount_point}",
    )
    return Path(mount_point)
