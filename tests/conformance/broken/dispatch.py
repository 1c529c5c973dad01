"""Not a broken loader itself: builds, for the case now running, the broken loader that case is
assigned to, so one pytest run checks many broken loaders (one interpreter start, not one each).

The assignment (case selector -> broken module) is the JSON file that ``LOADERSPEC_BROKEN_PLAN``
names; the running case is read from ``PYTEST_CURRENT_TEST``, which the scenario's forked child
inherits.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

from loaderspec.faultinject import driver, loaders

PLAN_ENV = "LOADERSPEC_BROKEN_PLAN"
NO_PLAN = "broken.dispatch: no broken loader assigned to"  # tests check no case failed on this


def matches(nodeid: str, selector: str) -> bool:
    """Whether pytest selector ``selector`` (a file, file::function or file::function[param])
    selects the case ``nodeid``."""
    if "::" not in selector:
        return nodeid.startswith(selector + "::")
    return nodeid == selector or nodeid.split("[")[0] == selector


def assigned(nodeid: str) -> str:
    with open(os.environ[PLAN_ENV]) as f:
        plan: dict[str, str] = json.load(f)
    for selector, module in plan.items():
        if matches(nodeid, selector):
            return module
    raise LookupError(f"{NO_PLAN} {nodeid}")


def _assigned_class() -> type:
    nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    return importlib.import_module(f"broken.{assigned(nodeid)}").Loader


class Loader:
    """Constructs ``broken.<assigned module>.Loader`` with the arguments it was given."""

    def __new__(cls, dataset: Any, **kwargs: Any) -> Any:
        if "PYTEST_CURRENT_TEST" not in os.environ:
            # The plugin's build check, before any case runs: no broken loader is assigned yet.
            raise NotImplementedError("broken.dispatch builds a loader only for a running case")
        return _assigned_class()(dataset, **kwargs)

    @classmethod
    def loaderspec_workers(cls) -> str:
        """What the running case's broken loader's workers are (declared or observed)."""
        return driver.workers(_assigned_class())

    @classmethod
    def loaderspec_stateful(cls) -> bool:
        """Whether the running case's broken loader has state_dict()/load_state_dict()."""
        return loaders.stateful(_assigned_class())

    @classmethod
    def loaderspec_unsupported(cls, **kwargs: Any) -> str | None:
        """What the running case's broken loader cannot express."""
        return loaders.unsupported(_assigned_class(), kwargs)
