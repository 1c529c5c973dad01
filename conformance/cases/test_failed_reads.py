"""A result the loader's process cannot read back (a failed read: FaultRecvError), read by the
main thread or by the pin-memory thread (whose death it then is: FaultPinDeath): the loader
raises, it does not hand out the rest of the epoch as if nothing was lost, nor hang
(NoSilentLoss, IterationTerminates). For any loader whose workers send results as bytes
(processes); with pin_memory where pinning can be checked."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    Grade,
    accelerator,
    checks,
    kwargs,
    needs_worker_processes,
    play,
    spec_property,
)
from loaderspec.faultinject.driver import Run
from loaderspec.faultinject.events import Error
from loaderspec.faultinject.faults import Unloadable

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_SILENT_LOSS
NO_READ = "a thread worker's result is handed over as an object, never read back from bytes"


def _raised(grade: Grade, r: Run, what: str) -> None:
    errors = r.of(0, Error)
    if not errors:
        grade.fail(
            PROP,
            f"an error at item 2, which cannot be read back ({what})",
            f"{r.batches()} then {r.last()}",
        )
        return
    before = r.batches()
    if before not in ([], [[0]], [[0], [1]]):  # the failed read may come while item 1 is awaited
        grade.fail(PropertyName.EXACTLY_ONCE, "at most items 0 and 1 before the error", f"{before}")
    grade.bounded(PropertyName.ITERATION_TERMINATES, "read_error_s", errors[0].dt, f"{what} raised")


@pytest.mark.quick
@spec_property(PROP, PropertyName.ITERATION_TERMINATES)
def test_a_result_that_cannot_be_read_raises(loader_cls: type, grade: Grade) -> None:
    """2 workers, batch_size=None: item 2 pickles in its worker but cannot be unpickled in the
    loader's process; next() raises (after at most items 0 and 1), within the bounds.

    Property: NoSilentLoss. Seed (dataloader.py, _try_get_data): an exception from
    "self._data_queue.get(timeout=timeout)" other than queue.Empty is raised to the caller.
    Guards: F4 KatherLab/MediSwarm#574 (a result that cannot be rebuilt where it is read).
    """
    needs_worker_processes(loader_cls, NO_READ)
    r = play(
        loader_cls,
        n=6,
        faults=(Unloadable(2),),
        kwargs=kwargs(2, 2, batch_size=None, in_order=True),
    )
    _raised(grade, r, "a failed read")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.ITERATION_TERMINATES, PropertyName.SHUTDOWN_COMPLETES)
def test_pin_thread_death_on_an_unreadable_result_raises(loader_cls: type, grade: Grade) -> None:
    """pin_memory=True, 2 workers, batch_size=None: item 2 cannot be unpickled where the results
    are read (torch's pin thread, which dies of it); next() raises, within the bounds, and the
    loader shuts down with nothing left.

    Property: NoSilentLoss. Seed (dataloader.py, _try_get_data): "if self._pin_memory and not
    self._pin_memory_thread.is_alive(): ... raise RuntimeError('Pin memory thread exited
    unexpectedly')".
    Guards: F2 pytorch/pytorch#21554 (the pin thread gone, the main process waits on it).
    """
    accelerator.require()
    needs_worker_processes(loader_cls, NO_READ)
    r = play(
        loader_cls,
        n=6,
        faults=(Unloadable(2),),
        setup=accelerator.load,
        kwargs=kwargs(2, 2, batch_size=None, in_order=True, pin_memory=True),
    )
    _raised(grade, r, "a failed read in the pin thread")
    checks.nothing_left(grade, r)
