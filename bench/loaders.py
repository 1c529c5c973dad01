"""Which loaders the benchmark compares, found by import path; a missing one is a reason.

Owns the names shown in the report and how each loader class is imported. Nothing else.
"""

from __future__ import annotations

import importlib

# Report name -> "module:attribute". Order is the report's column order.
LOADERS: dict[str, str] = {
    "torch": "torch.utils.data:DataLoader",
    "reference": "reference:DataLoader",
    "torchdata": "torchdata.stateful_dataloader:StatefulDataLoader",
}


def resolve(name: str) -> type:
    """Import the loader class called ``name`` in ``LOADERS``.

    Raises:
        ImportError: the module or attribute is missing (the message names which).
        KeyError: ``name`` is not a known loader.
    """
    module_name, _, attr = LOADERS[name].partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ImportError(f"{module_name} has no {attr}") from exc


def unavailable_reason(name: str) -> str | None:
    """Why loader ``name`` cannot be imported here, or None when it can."""
    try:
        resolve(name)
    except Exception as exc:  # any import-time failure is a reason to show, not a crash
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None
