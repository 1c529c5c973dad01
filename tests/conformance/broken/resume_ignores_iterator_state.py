"""Bug: an IterableDataset with no state_dict of its own is resumed by count within its epoch:
the state of the iterator `iter(dataset)` returned (a generator seeded when it was made) is
neither saved nor drawn again, so the resumed items are other values (ResumeEquivalence; the
reference's until 2026-11-28)."""

from broken._stateful import Stateful


class Loader(Stateful):
    def replayed(self) -> int:
        if self.iterable and not self.dataset_saves:
            return 0  # the bug: what made the iterator is not restored
        return super().replayed()
