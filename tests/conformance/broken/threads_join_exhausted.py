"""Bug: when an IterableDataset worker runs out, the main process joins it with a 2 s timeout
(the worker waits for work, so the join waits it out): the epoch stalls 2 s per exhausted worker
(PromptFaultHandling: NON-STRICT). Built on correct.threads."""

from typing import Any

from correct import threads
from correct._protocol import NonPersistentIter

JOIN_S = 2.0


class _JoinsExhausted(NonPersistentIter):
    transport: Any

    def retired(self, worker: int) -> None:
        self.transport.threads[worker].join(JOIN_S)  # the bug: waits for a worker still running


class Loader(threads.Loader):
    iterator = _JoinsExhausted
