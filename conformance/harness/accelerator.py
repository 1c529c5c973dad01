"""Pinned memory for the pin-memory cases: loaderspec.fakeaccel (a genuine pinning backend
without a GPU), or CUDA.

`missing()` says, in the pytest process, why pinning cannot be checked here (None: it can), and
`require()` SKIPs a case then;
`load()` is a plan's `setup`: it loads fakeaccel in the sandbox child, where loading it (once
per process, irreversibly) cannot affect the pytest process.
"""

from __future__ import annotations

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
    """SKIP the running case when pinning cannot be checked here (`missing()` says why)."""
    import pytest

    why = missing()
    if why:
        pytest.skip(why)


def load() -> None:
    """Load fakeaccel into this process where it is available (else CUDA pins, or nothing)."""
    try:
        from loaderspec import fakeaccel
    except ImportError:
        return
    if fakeaccel.available():
        fakeaccel.load()
