"""Module-level loader classes for the driver's tests (a sandboxed loader must import by name):
loaders that say what they cannot do, and loaders that leave something behind."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

NO_SPAWN = "this loader starts its workers with fork only"
NO_IN_ORDER = "in_order=False: this loader always delivers in order"
NO_ITERABLE = "an IterableDataset: this loader reads map-style datasets only"

# Processes the leaking loaders started, kept so nobody joins (or reaps) them.
_KEPT: list[Any] = []


class DeclaresForkOnly(DataLoader):
    """Declares, before anything starts, that only the fork start method is supported."""

    @classmethod
    def loaderspec_unsupported(cls, **loader_kwargs: Any) -> str | None:
        if loader_kwargs.get("multiprocessing_context") not in (None, "fork"):
            return NO_SPAWN
        return None


class DeclaresMapStyleOnly(DataLoader):
    """Declares, from the dataset it is shown, that it cannot read an IterableDataset."""

    @classmethod
    def loaderspec_unsupported(cls, dataset: Any = None, **loader_kwargs: Any) -> str | None:
        return NO_ITERABLE if isinstance(dataset, IterableDataset) else None


class RefusesInConstructor(DataLoader):
    """Declares nothing; its constructor raises NotImplementedError for in_order=False."""

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        if kwargs.get("in_order") is False:
            raise NotImplementedError(NO_IN_ORDER)
        super().__init__(dataset, **kwargs)


class TakesFewArguments:
    """A constructor that knows only some of torch's arguments (no **kwargs)."""

    def __init__(self, dataset: Any, batch_size: int = 1, num_workers: int = 0) -> None:
        self.inner = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers)

    def __iter__(self) -> Any:
        return iter(self.inner)


class SwallowsKwargs(DataLoader):
    """Takes **kwargs, then rejects `timeout` the way Python does (TypeError's own words)."""

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        if "timeout" in kwargs:
            raise TypeError("__init__() got an unexpected keyword argument 'timeout'")
        super().__init__(dataset, **kwargs)


class BadArgument(DataLoader):
    """A TypeError that is not a refusal: a real error of the loader (not a SKIP)."""

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        raise TypeError("batch_size should be a positive integer value")


def _sleep() -> None:
    time.sleep(600)  # the leak itself: a process nobody stops (the sandbox kills it by pid)


def _exit_now() -> None:
    """Return at once: the process exits, and stays a zombie until someone joins it."""


class _StartsAHelper(DataLoader):
    """Starts `helper` in a process (fork, so it is ours) and never joins it."""

    helper: Any = None

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        proc = multiprocessing.get_context("fork").Process(target=type(self).helper, daemon=False)
        proc.start()
        _KEPT.append(proc)


class LeaksAProcess(_StartsAHelper):
    """Its helper never ends."""

    helper = staticmethod(_sleep)


class LeavesAZombie(_StartsAHelper):
    """Its helper exits at once: a zombie."""

    helper = staticmethod(_exit_now)
