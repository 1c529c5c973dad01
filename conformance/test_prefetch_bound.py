"""PrefetchBound (MUST): at most prefetch_factor * num_workers batches are loaded ahead (fetched and
not yet handed out) at any time."""

from __future__ import annotations

import pytest

from conformance import _scenarios
from conformance._cases import run
from conformance.grading import Grade

PROP = "PrefetchBound"


@pytest.mark.quick
@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize(("workers", "prefetch"), [(1, 1), (2, 1), (2, 3), (3, 2)])
def test_fetches_never_run_ahead_of_consumption_by_more_than_the_window(
    loader_cls: type, grade: Grade, workers: int, prefetch: int
) -> None:
    """A slow consumer: after c batches were taken, at most c + prefetch_factor * num_workers
    items have been fetched (observed from the fetch records the workers write).

    Property: PrefetchBound. Seed (DataLoader docs): "2 means there will be a total of
    2 * num_workers batches prefetched across all workers."
    Guards: G2 pytorch/pytorch#25691 (fds and memory in flight grow with the prefetch depth).
    """
    r = run(
        _scenarios.prefetch_window,
        loader_cls,
        {"num_workers": workers, "prefetch_factor": prefetch},
        30,
        6,
    )
    for step in r.result["steps"]:
        bound = step["consumed"] + step["window"]
        if step["fetched"] > bound:
            grade.fail(
                PROP,
                f"at most {bound} items fetched after {step['consumed']} were consumed",
                f"{step['fetched']} fetched",
            )
    if r.result["leaks"]:
        grade.fail("ShutdownCompletes", "nothing left", r.result["leaks"])
