"""fakeaccel: genuine pinned memory without a GPU, through torch's own pinning path.

``load()`` builds (once, cached) and loads a tiny torch C++ library that registers a
``privateuse1`` backend named ``fakeaccel``: a host allocator (plain aligned malloc plus a
registry of its blocks), the PrivateUse1 hooks (``isPinnedPtr``, ``getPinnedMemoryAllocator``,
``hasPrimaryContext``, device count and index) and a device guard. After it,
``torch.accelerator.current_accelerator()`` is ``fakeaccel``, ``tensor.pin_memory()`` returns a
tensor whose storage came from that allocator, ``is_pinned()`` answers from the registry, and
``torch.utils.data.DataLoader(pin_memory=True)`` starts its real pin-memory thread: the code
under test is torch's, only the allocator is ours. There is no device memory: ``.to("fakeaccel")``
is not supported.

Loading is per process and irreversible (torch allows one privateuse1 backend per process, and
it becomes *the* accelerator): load it in test processes or children, not in a library import.
Nothing is built or loaded on import of this package.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import torch

from loaderspec.fakeaccel import _build, _device

__all__ = [
    "DEVICE",
    "BuildUnavailable",
    "available",
    "build_elsewhere",
    "load",
    "pinned_allocations",
]

DEVICE = "fakeaccel"
BuildUnavailable = _build.BuildUnavailable

_lock = threading.Lock()
_library: ctypes.CDLL | None = None


def load(*, verbose: bool = False) -> str:
    """Build if needed, load into this process and register the backend; return its name.

    Idempotent. The first call in a fresh cache compiles (10-60 s on 2 cores).

    Raises:
        BuildUnavailable: no compiler or ninja here; the process is unchanged.
        RuntimeError: another privateuse1 backend is already registered in this process, or
            the build failed; the process may have the backend name registered but not the
            library.
    """
    global _library
    with _lock:
        if _library is not None:
            return DEVICE
        if _privateuse1_name() not in ("privateuseone", DEVICE):
            raise RuntimeError(
                f"another privateuse1 backend ({_privateuse1_name()!r}) is registered in this "
                "process; fakeaccel cannot be loaded beside it"
            )
        path = _build.build_and_load(verbose=verbose)
        if _privateuse1_name() != DEVICE:
            torch.utils.rename_privateuse1_backend(DEVICE)
        if not hasattr(torch, DEVICE):
            torch._register_device_module(DEVICE, _device)
        _library = ctypes.CDLL(str(path))  # the same handle torch loaded; for the counters
        return DEVICE


# A cold build under load (32 s at load 8), with room for the builds it queues behind.
BUILD_TIMEOUT_S = 300.0


def build_elsewhere(timeout_s: float = BUILD_TIMEOUT_S) -> str | None:
    """Build the library in a child process, so that this one stays without the backend; return
    None once it is built (at once when it already was), else why it is not.

    For a process that must not load it but whose children will, under deadlines too short for
    a cold build: the conformance cases' sandboxes get 20 s in all, and a build killed there
    only leaves the next case the same build to do. The child is `python -m loaderspec.fakeaccel`
    in its own session; on timeout that session (the compiler and ninja with it) is SIGKILLed.
    """
    if is_built():
        return None
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderspec.fakeaccel"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its session is its process group: by its pid
        proc.communicate()
        return f"fakeaccel: the build did not finish in {timeout_s:g} s"
    if proc.returncode != 0:
        tail = out.strip().splitlines()[-1:] or ["no output"]
        return f"fakeaccel: the build failed (exit {proc.returncode}): {tail[0]}"
    return None


def available() -> bool:
    """Whether ``load()`` can succeed here without compiling: loaded, built, or buildable."""
    if _library is not None or _build.built_library() is not None:
        return True
    try:
        _build.check_toolchain()
    except BuildUnavailable:
        return False
    return True


def is_built() -> bool:
    """Whether the library for this source is already in the cache (loading is instant)."""
    return _build.built_library() is not None


def unavailable_reason() -> str | None:
    """Why ``available()`` is False, or None."""
    if available():
        return None
    try:
        _build.check_toolchain()
    except BuildUnavailable as exc:
        return str(exc)
    return None


def pinned_allocations() -> int:
    """How many blocks the fake pinned allocator has ever handed out in this process.

    Raises:
        RuntimeError: ``load()`` has not been called.
    """
    if _library is None:
        raise RuntimeError("fakeaccel is not loaded")
    fn = _library.fakeaccel_allocations
    fn.restype = ctypes.c_int64
    return int(fn())


def library_path() -> Path | None:
    """The cached library for this source, if built."""
    return _build.built_library()


def _privateuse1_name() -> str:
    return torch._C._get_privateuse1_backend_name()
