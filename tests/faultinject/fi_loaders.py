"""Module-level loader classes for the driver's tests (a sandboxed loader must import by name):
loaders that say what they cannot do, and loaders that leave something behind."""

from __future__ import annotations

import multiprocessing
import os
import threading
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


class ClosesLaterAfterTheFirst(DataLoader):
    """Holds a pipe; the first instance closes it as it is dropped, each later one from a thread
    a moment after (an `mp.Queue`'s feeder thread, whose timing varies from loader to loader)."""

    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pipe = os.pipe()
        self.late = type(self).made > 0
        type(self).made += 1

    def __del__(self) -> None:
        if self.late:
            threading.Thread(target=self._close, args=(0.2,), name="closes-later").start()
        else:
            self._close(0.0)

    def _close(self, after_s: float) -> None:
        time.sleep(after_s)  # the scenario itself: a close that comes after the drop
        for fd in self.pipe:
            os.close(fd)


_PROCESS_HELPER: list[Any] = []


def _start_process_helper() -> None:
    """A thread kept for the whole process, shared by every loader (grain's deletion pool)."""
    import threading

    if not _PROCESS_HELPER:
        thread = threading.Thread(target=threading.Event().wait, name="process-wide", daemon=True)
        thread.start()
        _PROCESS_HELPER.append(thread)


class StartsAProcessWideThread(DataLoader):
    """Its first instance starts a thread that serves the whole process from then on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _start_process_helper()
        super().__init__(*args, **kwargs)


class DeclaresItsProcessWideThread(StartsAProcessWideThread):
    """The same, declared: the harness starts the thread before it takes the leak baseline."""

    @classmethod
    def loaderspec_process_helpers(cls) -> None:
        _start_process_helper()


class FetchesInThreads:
    """Fetches every item in a thread pool of its own process (a thread-based design)."""

    def __init__(self, dataset: Any, batch_size: int = 1, num_workers: int = 0, **_: Any) -> None:
        self.dataset, self.workers = dataset, max(num_workers, 1)

    def __iter__(self) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            return iter(list(pool.map(self.dataset.__getitem__, range(len(self.dataset)))))


class StartsWorkersAtFirstNext(DataLoader):
    """Starts its workers at the first next(), not at iter() (SPDL's and grain's loaders)."""

    def __iter__(self) -> Any:
        return _Lazy(lambda: super(StartsWorkersAtFirstNext, self).__iter__())


class _Lazy:
    def __init__(self, start: Any) -> None:
        self.start, self.it = start, None

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        if self.it is None:
            self.it = self.start()
        return next(self.it)


class FetchesInTheCaller(FetchesInThreads):
    """Fetches every item in the thread that iterates it (no workers to see)."""

    def __iter__(self) -> Any:
        return iter([self.dataset[i] for i in range(len(self.dataset))])


class SaysItHasThreads(DataLoader):
    """Declares what its workers are (whatever they really are)."""

    loaderspec_workers = "threads"


class SaysNonsense(DataLoader):
    """Declares a kind of worker that does not exist."""

    loaderspec_workers = "fibres"
