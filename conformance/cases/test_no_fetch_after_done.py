"""NoFetchAfterDone (SHOULD): after workers_done_event is set, no worker takes a new index to fetch:
it only waits for its sentinel (a fetch under way may finish)."""

from __future__ import annotations

from typing import Literal

import pytest
from loaderspec.conformance.harness import (
    Await,
    Grade,
    Leave,
    Run,
    checks,
    kwargs,
    play,
    spec_property,
)
from loaderspec.faultinject.events import Dropped, Event, LoaderDropped

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_FETCH_AFTER_DONE

# Every fetch takes this long: a worker that ignores the done event starts its next queued fetch
# about this long after shutdown began; one that obeys it started its last fetch before (a fetch
# seen LATE_S after shutdown began is no race of a fetch begun just before it).
FETCH_S = 0.6
LATE_S = FETCH_S / 2


def _queued_at_every_worker(
    loader_cls: type, how: Literal["drop", "break"], persistent: bool
) -> Run:
    """Slow fetches, 4 tasks queued at each of 2 workers; the user leaves after one batch, as
    worker 0's next fetch (item 2) has just started."""
    return play(
        loader_cls,
        n=40,
        cost_s=FETCH_S,
        before_leave=Await("fetch", index=2),
        leave={0: Leave(how, 1)},
        kwargs=kwargs(2, 4, batch_size=1, persistent_workers=persistent),
    )


def _no_fetch_after(grade: Grade, r: Run, shutdown: Event | None, what: str) -> None:
    """Grade the fetches that started LATE_S or more after `shutdown` began."""
    if shutdown is None:
        grade.non_strict(PROP, None, f"no {what} to time the fetches by; last: {r.last()}")
        return
    began = shutdown.t - shutdown.dt
    late = sorted(f.index for f in r.fetches if f.event == "fetch" and f.t > began + LATE_S)
    if late:
        grade.non_strict(
            PROP, None, f"items {late} fetched {LATE_S:g} s or more after the {what} began"
        )
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP)
def test_workers_fetch_nothing_once_shutdown_began(loader_cls: type, grade: Grade) -> None:
    """Slow fetches with tasks queued at every worker: once the iterator is dropped, no worker
    starts another fetch.

    Property: NoFetchAfterDone. Seed (NOTE, worker a): "the workers will not process data after
    the done event is set" ("keep continuing until get [the final signal], and skip the
    processing steps").
    Guards: A4 pytorch PR #9655 (workers went on through every queued batch before they quit;
    the done event stops them).
    """
    r = _queued_at_every_worker(loader_cls, "drop", persistent=False)
    _no_fetch_after(grade, r, r.first(Dropped), "drop of the iterator")


@spec_property(PROP)
def test_persistent_workers_fetch_nothing_once_the_loader_is_dropped(
    loader_cls: type, grade: Grade
) -> None:
    """Persistent workers with slow fetches queued: the user breaks off after one batch and
    drops the loader; once the loader is dropped (its shutdown), no worker starts another fetch.

    Property: NoFetchAfterDone. Seed (NOTE, "[main process] ... (c) Exit the workers"):
    "i. set workers_done_event ... the workers will not process data after the done event is
    set" ("it allows us to skip wasting resources processing indices already in index_queue").
    Guards: A1 pytorch/pytorch#81794 (persistent workers went on while shutdown waited for
    them), A4 pytorch PR #9655 (workers went on through every queued batch before they quit).
    """
    r = _queued_at_every_worker(loader_cls, "break", persistent=True)
    _no_fetch_after(grade, r, r.first(LoaderDropped, epoch=None), "drop of the loader")
