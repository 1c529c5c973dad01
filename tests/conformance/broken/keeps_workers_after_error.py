"""Bug: a fatal error (a worker's death, a timeout) is raised and the iterator is failed (every
later next() raises it again), but its workers are left running until the iterator is dropped
(FatalErrorShutsDown; torch's B4: after the timeout error the stuck workers stay alive). Built
on the reference, whose failed iterator shuts down at once."""

from __future__ import annotations

from typing import Any

from loaderspec.reference import DataLoader as Reference
from loaderspec.reference.shell import MultiProcessingIter


class _KeepsWorkers(MultiProcessingIter):
    dropped = False

    def shut_down(self) -> None:
        if self._core.failure is not None and not self.dropped:
            return  # the bug: a failed iterator keeps its workers until it is dropped
        super().shut_down()

    def __del__(self) -> None:
        self.dropped = True
        super().__del__()


class Loader(Reference):
    def _get_iterator(self) -> Any:
        if self.num_workers == 0:
            return super()._get_iterator()
        return _KeepsWorkers(self)
