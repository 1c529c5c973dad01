"""Bug: a map-style state (mid-epoch or at an epoch's end) is resumed by count within its epoch
alone: what the epochs before it drew (the workers' base seeds, torch's RNG in the loader's
process, a sampler's own epoch) is drawn afresh, so items drawn from torch's RNG come with other
values
(ResumeEquivalence; the reference's until 2026-11-28: worker seeds and a map-style dataset's own
state not saved)."""

from broken._stateful import Stateful


class Loader(Stateful):
    def replayed(self) -> int:
        if not self.iterable:
            return 0  # the bug: nothing before the epoch is restored
        return super().replayed()
