"""PinThreadExitsFirst (SHOULD): at shutdown the pin-memory thread has stopped reading before any
worker is told to exit."""

from __future__ import annotations

import pytest

from conformance import _scenarios
from conformance._cases import kwargs, run
from conformance.grading import Grade

PROP = "PinThreadExitsFirst"


@pytest.mark.spec_property(PROP, "ShutdownCompletes")
@pytest.mark.parametrize("persistent", [False, True])
def test_pinned_batches_and_clean_shutdown_after_break(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """pin_memory=True: every batch is pinned; break after 2 batches stops the pin thread and the
    workers with nothing left (the pin thread must stop before the workers, or it reads torn
    results and hangs or raises).

    Property: PinThreadExitsFirst. Seed (NOTE, main process c): "This has to be after (b)
    because it may leave corrupted data in worker_result_queue, which pin_memory_thread reads".
    Guards: A1 pytorch/pytorch#81794 (pin + persistent: ~5 s stall per worker at exit), F2
    pytorch/pytorch#21554 part 2 (main hangs joining the pin thread).
    """
    why = _scenarios.accelerator()
    if why:
        pytest.skip(why)
    r = run(_scenarios.pinned, loader_cls, kwargs(2, 2, persistent_workers=persistent), must=PROP)
    if not all(r.result["pinned"]):
        grade.fail(PROP, "every batch pinned", f"is_pinned per batch: {r.result['pinned']}")
    if r.result["leaks"]:
        grade.fail("ShutdownCompletes", "nothing left after break", r.result["leaks"])
    grade.bounded("ShutdownCompletes", "shutdown_s", r.result["drop_s"], "shutdown with pinning")
