"""PinThreadExitsFirst (SHOULD): at shutdown the pin-memory thread has stopped reading before any
worker is told to exit."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import (
    Grade,
    Leave,
    accelerator,
    checks,
    kwargs,
    play,
    shutdown_s,
    spec_property,
)
from loaderspec.faultinject.events import Batch

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.PIN_THREAD_EXITS_FIRST


@spec_property(PROP, PropertyName.SHUTDOWN_COMPLETES)
@pytest.mark.parametrize("persistent", [False, True])
def test_pinned_batches_and_clean_shutdown_after_break(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """pin_memory=True: every batch is pinned; break after 2 batches stops the pin thread and the
    workers with nothing left (the pin thread should stop before the workers, or it reads torn
    results and hangs or raises). A SHOULD: batches not pinned (no pin thread to stop first)
    grade NON-STRICT; a hang or anything left behind is a ShutdownCompletes FAIL.

    Property: PinThreadExitsFirst. Seed (NOTE, main process c): "This has to be after (b)
    because it may leave corrupted data in worker_result_queue, which pin_memory_thread reads".
    Guards: A1 pytorch/pytorch#81794 (pin + persistent: ~5 s stall per worker at exit), F2
    pytorch/pytorch#21554 part 2 (main hangs joining the pin thread).
    """
    accelerator.require()
    r = play(
        loader_cls,
        n=12,
        leave={0: Leave("break", 2)},
        setup=accelerator.load,
        kwargs=kwargs(2, 2, batch_size=2, pin_memory=True, persistent_workers=persistent),
        must=PropertyName.SHUTDOWN_COMPLETES,
    )
    pinned = [bool(e.pinned) for e in r.of(0, Batch)]
    if not pinned or not all(pinned):
        grade.non_strict(PROP, None, f"pin_memory=True, yet is_pinned per batch: {pinned}")
    checks.nothing_left(grade, r)
    grade.bounded(
        PropertyName.SHUTDOWN_COMPLETES,
        "shutdown_s",
        shutdown_s(loader_cls, r),
        "shutdown with pinning",
    )
