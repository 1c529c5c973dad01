"""NoDeliveryAfterShutdown (MUST): nothing is handed out after StopIteration or a break until a new
iter() starts the next epoch: next() after the end raises StopIteration again."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, Hang, checks, kwargs, play
from loaderspec.faultinject.events import Batch, Error, Stop

PROP = "NoDeliveryAfterShutdown"


@pytest.mark.quick
@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize("persistent", [False, True])
def test_exhausted_iterator_keeps_raising_stopiteration(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """After StopIteration, next() on the same iterator raises StopIteration again, at once.

    Property: NoDeliveryAfterShutdown. Seed (NOTE, 1): the iterator shuts its workers down "when
    its last reference is gone or it is depleted".
    Guards: D3 pytorch/pytorch#59312 (the loader kept calling __next__ after StopIteration).
    """
    r = play(
        loader_cls,
        n=6,
        calls_after_stop=3,
        kwargs=kwargs(2, 2, batch_size=2, persistent_workers=persistent),
    )
    calls = r.calls()
    stop = next((i for i, e in enumerate(calls) if isinstance(e, Stop)), None)
    if stop is None:
        grade.fail(PROP, "an epoch ending in StopIteration", f"{[e.name for e in calls]}")
        return
    after = calls[stop + 1 :]
    if len(after) != 3 or not all(isinstance(e, Stop) for e in after):
        grade.fail(
            PROP, "StopIteration on each of 3 later next() calls", f"{[e.name for e in after]}"
        )
    if r.batches() != [[0, 1], [2, 3], [4, 5]]:
        grade.fail("ExactlyOnce", "[[0, 1], [2, 3], [4, 5]]", f"{r.batches()}")
    checks.nothing_left(grade, r)


@pytest.mark.quick
@pytest.mark.spec_property(PROP, "IterationTerminates")
def test_nothing_is_handed_out_after_a_timeout(loader_cls: type, grade: Grade) -> None:
    """timeout=1 and a fetch that takes 2.5 s: next() raises "timed out"; the three next() calls
    after it raise too (or end the epoch), and never hand out a batch, not even the late one.

    Property: NoDeliveryAfterShutdown. Seed (spec, MainTimeout): "`timeout` expired: raise,
    fail-stop" (the iterator is shut down, like after a worker's death).
    Guards: B4 pytorch/pytorch#21554 (after the timeout error the loader went on with workers
    in an unknown state).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Hang(2, 2.5),),
        calls_after_error=3,
        max_errors=3,
        kwargs=kwargs(2, 2, batch_size=1, timeout=1),
    )
    calls = r.calls()
    error = next((e for e in calls if isinstance(e, Error)), None)
    if error is None or "timed out" not in error.text:
        grade.fail("IterationTerminates", "a 'timed out' error", f"{[e.name for e in calls]}")
        return
    after = [e.value for e in calls[calls.index(error) + 1 :] if isinstance(e, Batch)]
    if after:
        grade.fail(PROP, "no batch after the timeout error", f"batches {after}")
    checks.nothing_left(grade, r)
