"""Bug: with `in_order=False`, a state counts the batches handed out and the resumed epoch skips
that many sampler positions from the start (`resume_skips_without_fetching`'s resume, out of
order too): when batches were handed out out of order, some handed out come again and some
never handed out are lost (CheckpointIsHandedOut; D6 pytorch PR #132189)."""

from typing import Any

from broken import resume_skips_without_fetching


class Loader(resume_skips_without_fetching.Loader):
    @classmethod
    def loaderspec_unsupported(cls, dataset: Any = None, **kwargs: Any) -> str | None:
        return super().loaderspec_unsupported(dataset, **{**kwargs, "in_order": True})
