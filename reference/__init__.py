"""The reference loader, ``from loaderspec.reference import DataLoader``: torch 2.13's API, the
spec's protocol.

``reference.core`` is the protocol as a pure state machine (its tables in
``reference.transitions``, its guards and compiled rows in ``reference.guards`` and
``reference.proposals``), ``reference.loop`` the one loop that runs it, ``reference.shell``
the processes and pipes it runs on. Trace records go through ``loaderspec.tracewriter``.
``get_worker_info`` is torch's own: inside a reference worker,
``torch.utils.data.get_worker_info()`` works as usual.

The names are imported on first use, so ``import reference.core`` (the pure core) does not
import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["DataLoader", "get_worker_info"]

_LAZY = {"DataLoader": "loaderspec.reference.loader", "get_worker_info": "torch.utils.data"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'reference' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
