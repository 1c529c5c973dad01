"""NoDispatchAfterEnd (MUST): nothing is sent to a worker for an epoch that has ended (StopIteration
or a break): no prefetch outlives its epoch. Seen from outside as the dataset's fetches: once the
epoch ended, only the tasks already in flight (at most prefetch_factor * num_workers) may still
be fetched."""

from __future__ import annotations

from typing import Literal

import pytest
from loaderspec.conformance.harness import Grade, Leave, checks, kwargs, play, spec_property
from loaderspec.faultinject.events import Dropped, Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.NO_DISPATCH_AFTER_END
TAKEN = 3  # batches handed out before the user leaves


@pytest.mark.quick
@spec_property(PROP)
@pytest.mark.parametrize(
    ("how", "persistent"), [("drop", False), ("break", True)], ids=["drop", "break-persistent"]
)
def test_leaving_an_epoch_sends_no_more_of_it(
    loader_cls: type, grade: Grade, how: Literal["drop", "break"], persistent: bool
) -> None:
    """24 items, 2 workers, prefetch 2: the user leaves after 3 batches (`del it`, or a `break`
    out of a persistent loader's loop); from then on at most the 4 tasks in flight are fetched,
    never the rest of the epoch.

    Property: NoDispatchAfterEnd. Seed (dataloader.py, _try_put_index): tasks are sent only
    from _next_data's live paths and _reset's priming loop; once the iterator is dropped, "the
    workers will not process data after the done event is set" (NOTE, worker a).
    Guards: A4 pytorch/pytorch#9985 (a `break` out of a loader that went on with the epoch's
    work), E5 PaddlePaddle/Paddle#48964 (a persistent loader's abandoned epoch went on).
    """
    args = kwargs(2, 2, batch_size=1, persistent_workers=persistent)
    r = play(loader_cls, n=24, records=True, leave={0: Leave(how, TAKEN)}, kwargs=args)
    dropped = r.first(Dropped)
    assert dropped is not None  # the driver notes every leaving
    began = dropped.t - dropped.dt
    late = sorted({f.index for f in r.fetches if f.event == "fetch" and f.t > began})
    window = checks.prefetch_window(args)
    if len(late) > window:
        grade.fail(
            PROP,
            f"at most the {window} tasks in flight fetched after the user left the epoch",
            f"{len(late)} items fetched after it: {late}",
        )
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.NO_DELIVERY_AFTER_SHUTDOWN)
@pytest.mark.parametrize("persistent", [False, True])
def test_nothing_is_fetched_after_stopiteration(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """A map-style dataset of 8 items, batches of 2: the epoch fetches each item once, and
    nothing is fetched after StopIteration, not by the 3 next() calls after it either (they
    raise StopIteration too).

    Property: NoDispatchAfterEnd. Seed (dataloader.py, _next_data): at the end "if not
    self._persistent_workers: self._shutdown_workers(); raise StopIteration" - no task is sent
    once the sampler has run dry.
    Guards: D3 pytorch/pytorch#59312 (the loader kept asking the dataset after StopIteration:
    the dataset was scanned again).
    """
    n = 8
    args = kwargs(2, 2, batch_size=2, persistent_workers=persistent)
    r = play(loader_cls, n=n, records=True, calls_after_stop=3, kwargs=args)
    stop = r.first(Stop)
    if stop is None:
        grade.fail(
            PropertyName.NO_DELIVERY_AFTER_SHUTDOWN, "an epoch ending in StopIteration", r.last()
        )
        return
    fetched = sorted(f.index for f in r.fetches if f.event == "fetch")
    late = sorted(f.index for f in r.fetches if f.event == "fetch" and f.t > stop.t)
    if late or len(fetched) != n:
        grade.fail(
            PROP,
            f"each of the {n} items fetched once, none after StopIteration",
            f"items fetched: {fetched}; after StopIteration: {late}",
        )
    checks.nothing_left(grade, r)
