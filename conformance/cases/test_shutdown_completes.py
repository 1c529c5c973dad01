"""ShutdownCompletes (MUST): once shutdown starts, every worker and the pin-memory thread are
eventually gone, stuck workers included."""

from __future__ import annotations

import pytest
import torch

from conformance.harness import Await, Die, Grade, Hang, Leave, checks, kwargs, play, shutdown_s

PROP = "ShutdownCompletes"


@pytest.mark.quick
@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize("how", ["drop", "break", "raise"])
def test_leaving_an_epoch_early_stops_every_worker(
    loader_cls: type, grade: Grade, how: str
) -> None:
    """del of the iterator, break, or an exception in the loop after 3 batches: nothing left.

    Property: ShutdownCompletes. Seed (NOTE, 1): "The iterator gracefully exits the workers when
    its last reference is gone or it is depleted."
    Guards: A4 pytorch/pytorch#9985 (break out of a partly consumed loader hangs), A3
    pytorch/pytorch#48666 (exception in the loop hangs at exit).
    """
    r = play(
        loader_cls,
        n=200,
        leave={0: Leave(how, 3)},
        kwargs=kwargs(2, 2, batch_size=2),
    )
    grade.figure("shutdown_s", shutdown_s(loader_cls, r))
    checks.nothing_left(grade, r)


@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize("in_order", [True, False])
def test_dropping_a_persistent_loader_stops_its_workers(
    loader_cls: type, grade: Grade, in_order: bool
) -> None:
    """Persistent workers outlive epochs but not the loader: after del loader nothing is left.

    Property: ShutdownCompletes. Seed (dataloader.py, _shutdown_workers): "If we are using
    workers_status with persistent_workers we have to shut it down because the worker is paused".
    Guards: A1 pytorch/pytorch#81794 (persistent workers stall exit ~5 s per worker).
    """
    r = play(
        loader_cls,
        n=6,
        epochs=2,
        leave={1: Leave("drop", 1)},
        kwargs=kwargs(2, 2, batch_size=2, in_order=in_order, persistent_workers=True),
    )
    checks.nothing_left(grade, r)


@pytest.mark.spec_property(PROP, "PromptFaultHandling")
def test_stuck_worker_is_terminated_at_shutdown(loader_cls: type, grade: Grade) -> None:
    """A worker hung inside __getitem__ does not stop the iterator's shutdown; it is terminated.

    Property: ShutdownCompletes (bounded: 15 s MUST, 0.5 s SHOULD). Seed (dataloader.py,
    _shutdown_workers): "in case that we unfortunately reach here ... we kill the worker."
    Guards: A2 pytorch/pytorch#39570 -> PR #39869 (join with a timeout, then terminate).
    """
    r = play(
        loader_cls,
        n=20,
        faults=(Hang(5),),
        before_leave=Await("fetch", index=5),
        leave={0: Leave("drop", 2)},
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.nothing_left(grade, r)
    took = shutdown_s(loader_cls, r)
    grade.bounded(PROP, "shutdown_s", took, "shutdown with a stuck worker")


@pytest.mark.spec_property(PROP, "IterationTerminates")
def test_timeout_then_drop_leaves_no_hung_worker(loader_cls: type, grade: Grade) -> None:
    """timeout=1 with a hung worker: the timeout error, then dropping the iterator kills it.

    Property: ShutdownCompletes. Seed (architecture, timeout): "a hung worker is terminated at the
    shutdown that follows".
    Guards: B4 pytorch/pytorch#21554 (timeout raises but leaves the stuck workers alive).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Hang(2),),
        kwargs=kwargs(2, 2, batch_size=1, timeout=1),
    )
    errors = r.of(0, "error")
    if not errors or "timed out" not in str(errors[0]["value"]):
        grade.fail("IterationTerminates", "a 'timed out' error", f"{[e['value'] for e in errors]}")
    checks.nothing_left(grade, r)


def _big_item(i: int) -> torch.Tensor:
    """64 KiB per item: a collated batch of two is as big as a shared-memory batch gets to be
    (the reference loader's slots take batches from 64 KiB, torch collates into /dev/shm)."""
    return torch.full((8192,), float(i), dtype=torch.float64)


@pytest.mark.spec_property(PROP, "WorkerDeathRaises")
def test_worker_killed_holding_a_shared_batch_leaves_nothing(
    loader_cls: type, grade: Grade
) -> None:
    """A worker SIGKILLed right after collating a big batch, so holding the batch's shared memory
    (torch's segment, the reference's slot), is reported, and leaves no /dev/shm entry, fd or
    child once the loader is dropped.

    Property: ShutdownCompletes ("no child, zombie, thread, fd or /dev/shm entry is left").
    Seed (NOTE, 3): "All processes exit if any of them die unexpectedly by fatal signals", and
    the shared memory a dead worker held goes with it.
    Guards: G5 pytorch PR #81660 (killed processes leave shared-memory segments behind), E2
    pytorch PR #72269 (`/dev/shm/torch_*` left behind at shutdown).
    """
    r = play(
        loader_cls,
        n=12,
        item=_big_item,
        faults=(Die(6, point="after_collate"),),
        kwargs=kwargs(2, 2, batch_size=2),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)
