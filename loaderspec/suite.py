"""Where the conformance suite's own top-level packages live, and making them importable.

The suite is written against three top-level packages, ``conformance`` (the cases and their
harness), ``faultinject`` (the fault-injection engine) and ``reference`` (the reference loader,
the suite's default). A checkout keeps them at its top (``scripts/setup.sh`` puts the checkout on
the virtualenv's path). A wheel must not install such generic names into ``site-packages``:
they would clobber or shadow another project's own ``conformance`` or ``reference``. So the
wheel ships them inside ``loaderspec/_suite/`` (off ``sys.path``), and ``activate`` puts that
folder on ``sys.path`` only when something of loaderspec's needs them: a conformance run (the
pytest plugin), the ``loaderspec`` command, the replay of spec scenarios.

This module must stay free of imports beyond the standard library: the pytest plugin imports it
in every pytest session of an environment where loaderspec is installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["PACKAGES", "SuiteClashError", "activate", "location", "owns"]

PACKAGES = ("conformance", "faultinject", "reference")
_HERE = Path(__file__).resolve().parent

MSG_CLASH = (
    "loaderspec: the name {name!r} is already taken by {where}, not by loaderspec's suite "
    "({ours}); run the conformance suite where that other package is not importable (another "
    "directory, or without its path in PYTHONPATH)"
)


class SuiteClashError(ImportError):
    """Another package already owns one of the suite's top-level names in this process."""


def location() -> Path:
    """The folder that holds the suite's packages: ``loaderspec/_suite`` in an installed wheel,
    the checkout's top folder in a checkout."""
    installed = _HERE / "_suite"
    return installed if installed.is_dir() else _HERE.parent


def owns(path: str | Path | None) -> bool:
    """Whether ``path`` (a module's file or folder) lies inside the suite's location."""
    if path is None:
        return False
    where = location()
    resolved = Path(path).resolve()
    return resolved == where or where in resolved.parents


def _origin(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is not None:
        paths: list[str | None] = list(getattr(module, "__path__", []))
        paths = paths or [getattr(module, "__file__", None)]
        return paths[0]
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    locations: list[str | None] = list(spec.submodule_search_locations or [])
    return (locations or [spec.origin])[0]


def activate() -> Path:
    """Make the suite's packages importable (idempotent); return their folder.

    Raises:
        SuiteClashError: another package already owns one of the names (imported, or earlier
            on ``sys.path``); nothing was imported, and ``sys.path`` keeps the suite's folder.
    """
    where = location()
    if str(where) not in sys.path:
        # First: in a conformance run the suite's names must be the suite's.
        sys.path.insert(0, str(where))
        importlib.invalidate_caches()
    for name in PACKAGES:
        origin = _origin(name)
        if origin is not None and not owns(origin):
            raise SuiteClashError(MSG_CLASH.format(name=name, where=origin, ours=where))
    return where
