"""`faultinject.collate(...)`: a collate_fn that can die or raise, and that lets unpicklable and
unloadable items through.

Collate runs in the worker that fetched the batch, right after the fetches, so a dataset arms a
`Die(point="in_collate")` (or `Raise(point="in_collate")`) in its own process and the collate
function fires it there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from loaderspec.faultinject import _fire
from loaderspec.faultinject.faults import (
    COLLATE_POINTS,
    Die,
    Raise,
    UnloadableItem,
    UnpicklableItem,
)
from torch.utils.data import default_collate

__all__ = ["FaultyCollate", "collate"]


class FaultyCollate:
    """Picklable collate_fn: fires its `in_collate` faults (`Die`, `Raise`), passes batches
    holding an `UnpicklableItem`, an `UnloadableItem` or `bytes` through as a list (so the *put*
    fails or blocks, or the loader's read fails, not collate), and otherwise calls `base`
    (torch's `default_collate`)."""

    def __init__(
        self,
        faults: tuple[Die | Raise, ...],
        base: Callable[[list[Any]], Any] | None,
        state_dir: str | None,
    ) -> None:
        for f in faults:
            if not isinstance(f, Die | Raise) or f.point not in COLLATE_POINTS:
                raise ValueError(
                    "collate() takes Die or Raise faults with point='in_collate' (or a Die with"
                    f" point='after_collate'), got {f!r}"
                )
        self.faults = faults
        self.base = base
        self.state_dir = state_dir
        self.home_pid = os.getpid()  # built in the loader's process: no Die there
        self.home_tid = threading.get_ident()

    def __call__(self, batch: list[Any]) -> Any:
        values = list(batch)
        after: list[Die] = []
        for f in self.faults:
            if isinstance(f, Die) and not _fire.may_fire_here(f, self.home_pid, self.home_tid):
                continue
            if _fire.take_armed(values, f.at) and _fire.claim_once(self.state_dir, f, None):
                if f.point == "after_collate":
                    assert isinstance(f, Die)
                    after.append(f)
                elif isinstance(f, Die):
                    _fire.fire_die(f)
                else:
                    _fire.fire_raise(f)
        if any(isinstance(v, UnpicklableItem | UnloadableItem | bytes) for v in values):
            return values
        collated = (self.base or default_collate)(batch)
        for f in after:
            _fire.fire_die(f)  # the batch exists: the worker dies holding it
        return collated


def collate(
    *faults: Die | Raise,
    base: Callable[[list[Any]], Any] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> FaultyCollate:
    """A collate_fn carrying `faults` (each `Die` or `Raise` with `point="in_collate"`, or a
    `Die` with `point="after_collate"`).

    Pass the same Die to the dataset too: the dataset arms it when it fetches `at` (any item
    type); alone, collate fires on a batch holding the int `at`. A once-only Die needs
    `state_dir` (use the dataset's `state_dir`). `base` defaults to torch's `default_collate`.
    """
    return FaultyCollate(tuple(faults), base, None if state_dir is None else os.fspath(state_dir))
