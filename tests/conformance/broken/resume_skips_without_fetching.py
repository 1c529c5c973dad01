"""Bug: a map-style resume drops the positions handed out from the sampler instead of fetching
them: what fetching them did to the user's dataset (its own state, the workers' RNG) is not
done, so the items after the resume come with other values (ResumeEquivalence; the reference's
until 2026-11-28: "indices only: no item is loaded twice", the dataset's own state not saved)."""

from typing import Any

from torch.utils.data import SequentialSampler

from broken._stateful import Dropping, Stateful


class Loader(Stateful):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if not self.iterable:
            self.dropping = Dropping(kwargs.get("sampler") or SequentialSampler(self.dataset))
            kwargs = {**kwargs, "sampler": self.dropping}
            self.per_batch = int(kwargs.get("batch_size") or 1)
        return kwargs

    def skipped(self) -> int:
        if self.iterable:
            return super().skipped()
        self.dropping.drop = super().skipped() * self.per_batch  # the bug: not fetched
        return 0
