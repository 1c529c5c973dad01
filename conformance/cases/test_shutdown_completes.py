"""ShutdownCompletes (MUST): once shutdown starts, every worker and the pin-memory thread are
eventually gone, stuck workers included."""

from __future__ import annotations

from typing import Literal

import pytest
from loaderspec.conformance.harness import (
    EVERY,
    NO_WORKER_TO_KILL,
    Await,
    Die,
    Grade,
    Hang,
    Leave,
    Run,
    Wide,
    accelerator,
    checks,
    hang_s,
    kwargs,
    needs_worker_processes,
    play,
    shutdown_s,
    spec_property,
)
from loaderspec.faultinject.events import Error, LoaderDropped

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.SHUTDOWN_COMPLETES


@pytest.mark.quick
@spec_property(PROP)
@pytest.mark.parametrize("how", ["drop", "break", "raise"])
def test_leaving_an_epoch_early_stops_every_worker(
    loader_cls: type, grade: Grade, how: Literal["drop", "break", "raise"]
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


@spec_property(PROP)
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


@pytest.mark.quick
@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
def test_stuck_worker_is_terminated_at_shutdown(loader_cls: type, grade: Grade) -> None:
    """A worker hung inside __getitem__ does not stop the iterator's shutdown; it is terminated.

    Property: ShutdownCompletes (bounded: 15 s MUST, 0.5 s SHOULD). Seed (dataloader.py,
    _shutdown_workers): "in case that we unfortunately reach here ... we kill the worker."
    Guards: A2 pytorch/pytorch#39570 -> PR #39869 (join with a timeout, then terminate).
    """
    _drop_with_a_stuck_worker(loader_cls, grade, "shutdown with a stuck worker")


def _drop_with_a_stuck_worker(
    loader_cls: type, grade: Grade, what: str, pin_memory: bool = False
) -> None:
    """Drop the iterator after 2 batches while a worker is hung in item 5's fetch: nothing
    left, and the shutdown bounded (15 s MUST, 0.5 s SHOULD)."""
    r = play(
        loader_cls,
        n=20,
        faults=(Hang(5, hang_s(loader_cls)),),
        before_leave=Await("fetch", index=5),
        leave={0: Leave("drop", 2)},
        setup=accelerator.load if pin_memory else None,
        kwargs=kwargs(2, 2, batch_size=1, **({"pin_memory": True} if pin_memory else {})),
    )
    _shutdown_graded(loader_cls, grade, r, what)


def _shutdown_graded(loader_cls: type, grade: Grade, r: Run, what: str) -> None:
    checks.nothing_left(grade, r)
    grade.bounded(PROP, "shutdown_s", shutdown_s(loader_cls, r), what)


@spec_property(PROP, PropertyName.ITERATION_TERMINATES)
def test_timeout_then_drop_leaves_no_hung_worker(loader_cls: type, grade: Grade) -> None:
    """timeout=1 with a hung worker: the timeout error, then dropping the iterator kills it.

    Property: ShutdownCompletes. Seed (architecture, timeout): "a hung worker is terminated at the
    shutdown that follows".
    Guards: B4 pytorch/pytorch#21554 (timeout raises but leaves the stuck workers alive).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Hang(2, hang_s(loader_cls)),),
        kwargs=kwargs(2, 2, batch_size=1, timeout=1),
    )
    errors = r.of(0, Error)
    if not errors or "timed out" not in errors[0].text:
        grade.fail(
            PropertyName.ITERATION_TERMINATES, "a 'timed out' error", f"{[e.text for e in errors]}"
        )
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
def test_dropping_an_iterator_with_large_results_in_flight_is_prompt(
    loader_cls: type, grade: Grade
) -> None:
    """Every item is bigger than a pipe and nobody reads the workers' results: dropping the
    iterator still stops every worker at once.

    Property: ShutdownCompletes (bounded: 15 s MUST, 0.5 s SHOULD). Seed (NOTE, worker b):
    "we call `data_queue.cancel_join_thread()` in worker ... which would otherwise block
    forever on flushing" the result queue at exit.
    Guards: C2 GaTech-RL2/EgoVerse#682 (workers blocked writing large samples), A2
    pytorch/pytorch#39570 (a join that waits for such a worker).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Die(EVERY, signal=None, point="blocked_put"),),
        # Item 0 was handed out; items 1 and 2 are made and being written, unread.
        before_leave=Await("fetched", count=3),
        leave={0: Leave("drop", 1)},
        kwargs=kwargs(2, 2, batch_size=1),
    )
    _shutdown_graded(loader_cls, grade, r, "shutdown with results in flight")


@spec_property(PROP, PropertyName.PIN_THREAD_EXITS_FIRST, PropertyName.PROMPT_FAULT_HANDLING)
def test_stuck_worker_with_the_pin_thread_is_terminated_at_shutdown(
    loader_cls: type, grade: Grade
) -> None:
    """pin_memory=True and a worker hung inside __getitem__: dropping the iterator stops the pin
    thread and terminates the worker, promptly.

    Property: ShutdownCompletes (bounded: 15 s MUST, 0.5 s SHOULD). Seed (NOTE, main process):
    "pin_memory_thread_done_event.set() ... then join the pin thread", before the workers are
    joined with a timeout and terminated.
    Guards: F2 pytorch/pytorch#21554 part 2 (main hangs joining the pin thread after stuck
    workers), pytorch/pytorch#24927 (the loader stuck inside pin_memory).
    """
    accelerator.require()
    _drop_with_a_stuck_worker(
        loader_cls, grade, "shutdown with a stuck worker and the pin thread", pin_memory=True
    )


LOADERS = 4


@spec_property(PROP)
def test_fd_count_stays_flat_across_persistent_pinned_loaders(
    loader_cls: type, grade: Grade
) -> None:
    """Four loaders one after the other, each with persistent workers and pin_memory=True, two
    epochs each: after each is dropped, the process has as many file descriptors open as after
    the first.

    Property: ShutdownCompletes. Seed (dataloader.py, _shutdown_workers): "If we are using
    workers_status with persistent_workers we have to shut it down because the worker is
    paused"; every queue is closed.
    Guards: E2 pytorch PR #72269 (pytorch#91252: persistent + pin memory, fds and shm left
    after each loader).
    """
    accelerator.require()
    r = play(
        loader_cls,
        n=6,
        epochs=2,
        loaders=LOADERS,
        setup=accelerator.load,
        kwargs=kwargs(2, 2, batch_size=2, pin_memory=True, persistent_workers=True),
    )
    fds = [e.fds for e in r.of(None, LoaderDropped)]
    if len(fds) != LOADERS or len(set(fds)) != 1:
        grade.fail(PROP, f"the same fd count after each of {LOADERS} loaders", f"{fds}")
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP, PropertyName.WORKER_DEATH_RAISES)
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
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        item=Wide(8192),  # 64 KiB items: batches in shared memory
        faults=(Die(6, point="after_collate"),),
        kwargs=kwargs(2, 2, batch_size=2),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)
