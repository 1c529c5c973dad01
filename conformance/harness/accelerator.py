"""Pinned memory for the pin-memory cases: loaderspec.fakeaccel (a genuine pinning backend
without a GPU), or CUDA.

`missing()` says, in the pytest process, why pinning cannot be checked here (None: it can), and
`require()` SKIPs a case then, or else builds fakeaccel (once) before the case's sandbox loads it;
`load()` is a plan's `setup`: it loads fakeaccel in the sandbox child, where loading it (once
per process, irreversibly) cannot affect the pytest process.
"""

from __future__ import annotations

import functools

__all__ = ["load", "missing", "require"]


def missing() -> str | None:
    """Why pinning cannot be checked here (None: it can). Prefers fakeaccel, then CUDA."""
    try:
        from loaderspec import fakeaccel
    except ImportError:
        # The optional module is absent: None stands for it.
        fakeaccel = None  # type: ignore[assignment]
    if fakeaccel is not None and fakeaccel.available():
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return "no accelerator: neither loaderspec.fakeaccel nor CUDA is available to pin memory"


def require() -> None:
    """SKIP the running case when pinning cannot be checked here (`missing()` says why, or the
    build of fakeaccel failed); otherwise return with fakeaccel built, if it is the backend."""
    import pytest

    why = missing() or _built()
    if why:
        pytest.skip(why)


@functools.cache
def _built() -> str | None:
    """Build fakeaccel in a child, once per process (None: built, or CUDA pins instead).

    A case's sandbox gets 20 s in all, no time for a cold build: one killed there leaves the
    next case the same build, and each pinning case hung in a clean CI."""
    try:
        from loaderspec import fakeaccel
    except ImportError:
        return None
    return fakeaccel.build_elsewhere() if fakeaccel.available() else None


def load() -> None:
    """Load fakeaccel into this process where it is available (else CUDA pins, or nothing)."""
    try:
        from loaderspec import fakeaccel
    except ImportError:
        return
    if fakeaccel.available():
        fakeaccel.load()
