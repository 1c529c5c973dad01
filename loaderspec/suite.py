"""Where the conformance suite's packages live.

The suite is three packages of loaderspec, ``loaderspec.conformance`` (the cases and their
harness), ``loaderspec.faultinject`` (the fault-injection engine) and ``loaderspec.reference``
(the reference loader, the suite's default). A checkout keeps them in its top-level folders
``conformance/``, ``faultinject/`` and ``reference/``; pyproject maps those folders to the
package names (the editable install of ``scripts/setup.sh`` too), and a wheel ships them inside
``loaderspec/``. They are imported by those names only: nothing is put on ``sys.path``, and a
user's own module named ``reference`` or ``conformance`` stays theirs.

This module must stay free of imports beyond the standard library: the pytest plugin imports it
in every pytest session of an environment where loaderspec is installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["PACKAGES", "location", "owns"]

PACKAGES = ("conformance", "faultinject", "reference")


def location() -> Path:
    """The folder that holds the suite's packages: ``loaderspec/`` in an installed wheel, the
    checkout's top folder in a checkout (found without importing them)."""
    spec = importlib.util.find_spec("loaderspec.conformance")
    assert spec is not None, "loaderspec.conformance"
    return Path(next(iter(spec.submodule_search_locations or []))).resolve().parent


def owns(path: str | Path | None) -> bool:
    """Whether ``path`` (a module's file or folder) lies inside one of the suite's packages."""
    if path is None:
        return False
    resolved = Path(path).resolve()
    tops = [location() / name for name in PACKAGES]
    return any(resolved == top or top in resolved.parents for top in tops)
