"""WorkerDeathRaises (MUST): a next() during which a worker it depends on is dead raises an error
that is not a timeout (or returns normally); it never hangs."""

from __future__ import annotations

import signal

import pytest
from loaderspec.conformance.harness import (
    EVERY,
    NO_WORKER_TO_KILL,
    Await,
    Die,
    Grade,
    Sleep,
    accelerator,
    checks,
    kwargs,
    needs_worker_processes,
    play,
    spec_property,
)

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.WORKER_DEATH_RAISES


@pytest.mark.quick
@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
@pytest.mark.parametrize("in_order", [True, False])
def test_worker_killed_before_fetch_raises(loader_cls: type, grade: Grade, in_order: bool) -> None:
    """A worker SIGKILLed inside __getitem__ makes next() raise an error naming the worker.

    Property: WorkerDeathRaises. Seed (NOTE, 3a): "For child exit, we register SIGCHLD handler
    on main process, which checks if any of the workers fail".
    Guards: B1 pytorch PR #3474 / #11985 (a segfaulting worker hung the loader).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        faults=(Die(5),),
        kwargs=kwargs(2, 2, batch_size=1, in_order=in_order),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_iterable_worker_killed_raises(loader_cls: type, grade: Grade) -> None:
    """IterableDataset: a worker SIGKILLed at its third item makes next() raise.

    Property: WorkerDeathRaises. Seed (NOTE, 3): "All processes exit if any of them die
    unexpectedly by fatal signals."
    Guards: B1 pytorch PR #15665 (worker death detection for every dataset kind).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        shards=(6, 6),
        faults=(Die(2),),
        kwargs=kwargs(2, 1, batch_size=1),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_worker_killed_in_collate_raises(loader_cls: type, grade: Grade) -> None:
    """A worker SIGKILLed inside collate_fn makes next() raise.

    Property: WorkerDeathRaises. Seed (worker loop): the worker fetches and collates a batch
    before putting it; dying at either point leaves the task without a result.
    Guards: B1 pytorch PR #11985 (worker killed mid-batch).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        faults=(Die(6, point="in_collate"),),
        kwargs=kwargs(2, 2, batch_size=2),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_worker_killed_while_blocked_on_full_pipe_raises(loader_cls: type, grade: Grade) -> None:
    """A worker SIGKILLed while it writes a result bigger than the pipe makes next() raise.

    Property: WorkerDeathRaises. Seed (NOTE, 3b): "in case that the receiver has ended abruptly
    while reading from the pipe, the join will hang forever" (a torn message is not an EOF).
    Guards: C2 GaTech-RL2/EgoVerse#682 (workers blocked writing large samples).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=8,
        faults=(Die(EVERY, signal=None, point="blocked_put"),),
        kill_worker_after=1,
        # Item 0 was handed out; its worker's next item (2, round robin) is made and being
        # written, too big for the pipe (item 1's worker is blocked writing it, unread).
        before_kill=Await("fetched", index=2),
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_idle_worker_killed_raises(loader_cls: type, grade: Grade) -> None:
    """A worker SIGKILLed (by pid, from outside) while it waits for work makes next() raise.

    Property: WorkerDeathRaises. Seed (dataloader.py, _try_get_data): "if any worker fails,
    raise" after a queue get times out, checking each worker's is_alive().
    Guards: B1 pytorch PR #6606-era test_proper_exit worker paths (idle worker killed).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        kill_worker_after=2,
        before_kill=Await("fetched", index=5),
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_worker_sigtermed_raises(loader_cls: type, grade: Grade) -> None:
    """A worker that gets SIGTERM inside __getitem__ (not from the loader's own shutdown) makes
    next() raise an error naming the worker.

    Property: WorkerDeathRaises. Seed (NOTE, 3a): "checks if any of the workers fail in the
    (Python) handler" - whatever the signal.
    Guards: I3 pytorch PR #4643 (fixes pytorch/pytorch#4507: SIGTERM handling of workers), B6
    pytorch/pytorch#43455 (SIGTERM and the SIGCHLD handler).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    r = play(
        loader_cls,
        n=12,
        faults=(Die(5, signal=signal.SIGTERM),),
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING)
def test_worker_death_while_next_waits_with_the_pin_thread_raises(
    loader_cls: type, grade: Grade
) -> None:
    """pin_memory=True, one worker: it dies while the main process is blocked in next() on its
    item; next() raises (the pin thread being alive says nothing about the worker).

    Property: WorkerDeathRaises. Seed (dataloader.py, _get_data): "while the pin thread is
    alive" the main process polls the data queue, and must still check the workers.
    Guards: B5 pytorch/pytorch#129224 (main waits for ever while the pin thread is alive and
    the worker has died).
    """
    needs_worker_processes(loader_cls, NO_WORKER_TO_KILL)
    accelerator.require()
    r = play(
        loader_cls,
        n=4,
        faults=(Sleep(0, 0.3), Die(0)),
        setup=accelerator.load,
        kwargs=kwargs(1, 1, batch_size=1, pin_memory=True),
    )
    checks.death_reported(grade, r)
    checks.nothing_left(grade, r)
