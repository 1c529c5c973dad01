"""Bug: persistent workers, results not told apart by epoch: a result of an abandoned epoch that
arrives in the next one is taken for that epoch's task of the same number (NoStaleEpochDelivery:
with a sequential sampler it even holds the same items). Built on correct.threads."""

from correct import threads
from correct._protocol import Iter


class _Untagged(Iter):
    def wanted(self, epoch: int, task: int) -> bool:
        return task in self.outstanding  # the bug: whatever epoch the result is of


class Loader(threads.Loader):
    persistent_iterator = _Untagged
