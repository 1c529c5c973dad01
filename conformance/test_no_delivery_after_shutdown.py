"""NoDeliveryAfterShutdown (MUST): nothing is handed out after StopIteration or a break until a new
iter() starts the next epoch: next() after the end raises StopIteration again."""

from __future__ import annotations

import pytest

from conformance import _scenarios
from conformance._cases import kwargs, run
from conformance.grading import Grade

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
    r = run(
        _scenarios.stopiteration_sticks,
        loader_cls,
        kwargs(2, 2, batch_size=2, persistent_workers=persistent),
        6,
    )
    after = r.result["after"]
    if any(kind != "stop" for kind, _ in after):
        grade.fail(PROP, "StopIteration on every later next()", f"{after}")
    if r.result["got"] != [[0, 1], [2, 3], [4, 5]]:
        grade.fail("ExactlyOnce", "[[0, 1], [2, 3], [4, 5]]", f"{r.result['got']}")
    if r.result["leaks"]:
        grade.fail("ShutdownCompletes", "nothing left", r.result["leaks"])
