"""A loader with `state_dict()` / `load_state_dict()` over the reference loader, resuming by
fast-forward; the resume cases' broken loaders (`broken.resume_*`) each change one thing of it.

Its state is the epoch, the batches handed out in it, a seed and `num_workers`: every epoch is
shuffled by a sampler with a generator of its own, seeded `seed + epoch` (`seed` drawn once from
the user's generator), so an epoch's order does not depend on what else drew from a generator
before it; a
loaded state is applied at the next `iter()`, which replays the epochs before it whole and then
reads and drops the batches already handed out: whatever the user's dataset, its iterators, the
sampler or torch's RNG drew or saved on the way is drawn again (the user's restart seeds as the
first run did), so the user's own state is kept without reading it. An IterableDataset's stream
depends on `num_workers`: a state taken with other workers is refused with a ValueError naming
both counts. Out-of-order delivery cannot be fast-forwarded (the order differs run to run):
refused.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, RandomSampler, Sampler

from broken._wrap import Relay, Wrapped


class StatefulRelay(Relay):
    """Counts what is handed out; ends the epoch in the loader's state at StopIteration."""

    loader: Stateful

    def __next__(self) -> Any:
        try:
            batch = next(self.it)
        except StopIteration:
            self.loader.epoch_ended()
            raise
        except Exception:
            self.loader.handed_out()  # an error handed out in its turn is a step too
            raise
        self.loader.handed_out()
        return batch


class Stateful(Wrapped):
    relay = StatefulRelay

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        self.num_workers = int(kwargs.get("num_workers", 0))
        self.dataset = dataset
        self.iterable = isinstance(dataset, IterableDataset)
        self.dataset_saves = callable(getattr(dataset, "state_dict", None))  # its own state
        self.shuffled = bool(kwargs.get("shuffle"))
        user = kwargs.get("generator")
        self.seeded = user is not None
        seed = int(torch.randint(2**62, (), generator=user)) if user is not None else 0
        self.rng = torch.Generator()
        if kwargs.get("shuffle"):
            # The sampler draws its permutation from `rng` alone, at the epoch's first next():
            # nothing else (a base seed drawn at iter(), or not with persistent workers) moves it.
            kwargs = {k: v for k, v in kwargs.items() if k not in ("shuffle", "generator")}
            kwargs["sampler"] = RandomSampler(dataset, generator=self.rng)
        self.position = {"epoch": 0, "taken": 0, "seed": seed, "num_workers": self.num_workers}
        self.loaded: dict[str, Any] | None = None
        self.open = False  # an epoch was started and has not ended
        self.fresh = False  # a state was loaded and no iterator made since
        super().__init__(dataset, **kwargs)

    @classmethod
    def loaderspec_unsupported(cls, dataset: Any = None, **kwargs: Any) -> str | None:
        if kwargs.get("in_order") is False:
            return "a fast-forward resume needs in_order=True (out of order, runs differ)"
        if kwargs.get("shuffle") and kwargs.get("generator", 0) is None:
            return "a shuffle resumes only from a seeded generator"
        return None

    def __iter__(self) -> Relay:
        if self.loaded is not None:
            self.position, self.loaded = self.loaded, None
        elif self.open:
            self.position = {**self.position, "epoch": self.position["epoch"] + 1, "taken": 0}
        first, self.fresh = self.fresh, False
        self.open = True
        epoch = self.position["epoch"]
        for before in range(epoch - self.replayed() if first else epoch, epoch):
            self.rng.manual_seed(self.position["seed"] + before)
            _drop(iter(self.inner), None)
        self.rng.manual_seed(self.position["seed"] + epoch)
        skipped = self.skipped()  # before the iterator: it may draw its sampler at once
        relay = super().__iter__()
        _drop(relay.it, skipped)
        return relay

    def replayed(self) -> int:
        """How many epochs the first iterator after a load replays before its own: all."""
        return int(self.position["epoch"])

    def skipped(self) -> int:
        """How many batches the new iterator reads and drops: those handed out before."""
        return int(self.position["taken"])

    def ended(self) -> bool:
        """Whether the position is the one an epoch's StopIteration left, nothing loaded."""
        return self.loaded is None and not self.open and self.position["epoch"] > 0

    def handed_out(self) -> None:
        self.position["taken"] += 1

    def epoch_ended(self) -> None:
        self.open = False
        self.position = {**self.position, "epoch": self.position["epoch"] + 1, "taken": 0}

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.loaded if self.loaded is not None else self.position)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.iterable and state["num_workers"] != self.num_workers:
            raise ValueError(
                f"this state was taken with num_workers={state['num_workers']}; an"
                f" IterableDataset's stream with num_workers={self.num_workers} differs"
            )
        self.loaded = copy.deepcopy(dict(state))
        self.open = False
        self.fresh = True


def _drop(it: Any, batches: int | None) -> None:
    """Read and drop `batches` batches of `it` (None: to its end); an error handed out before is
    skipped as its batch would be."""
    taken = 0
    while batches is None or taken < batches:
        taken += 1
        try:
            next(it)
        except StopIteration:
            return
        except Exception:
            continue


class Dropping(Sampler[Any]):
    """The sampler's indices but the first `drop` (once)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler, self.drop = sampler, 0

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[Any]:
        drop, self.drop = self.drop, 0
        for k, index in enumerate(self.sampler):
            if k >= drop:
                yield index
