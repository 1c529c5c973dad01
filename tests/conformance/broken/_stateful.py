"""A loader with `state_dict()` / `load_state_dict()` over the reference loader, resuming by
fast-forward; the resume cases' broken loaders (`broken.resume_*`) each change one thing of it.

Its state is the epoch, the batches handed out in it, a seed and `num_workers`: every epoch is
shuffled by a sampler with a generator of its own, seeded `seed + epoch` (`seed` drawn once from
the user's generator), so an epoch's order does not depend on what else drew from a generator
before it; a
loaded state is applied at the next `iter()`, which reads and drops the batches already handed
out. An IterableDataset's stream depends on `num_workers`: a state taken with other workers is
refused with a ValueError naming both counts. Out-of-order delivery cannot be fast-forwarded (the
order differs run to run): refused.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import IterableDataset, RandomSampler

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
        self.iterable = isinstance(dataset, IterableDataset)
        user = kwargs.get("generator")
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
        self.open = True
        self.rng.manual_seed(self.position["seed"] + self.position["epoch"])
        relay = super().__iter__()
        for _ in range(self.skipped()):
            try:
                next(relay.it)
            except StopIteration:
                break
            except Exception:  # an error handed out before: skipped as its batch would be
                continue
        return relay

    def skipped(self) -> int:
        """How many batches the new iterator reads and drops: those handed out before."""
        return int(self.position["taken"])

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
