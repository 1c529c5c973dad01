"""PrefetchBound (MUST): at most prefetch_factor * num_workers batches are loaded ahead (fetched and
not yet handed out) at any time."""

from __future__ import annotations

from typing import Any

import pytest
from loaderspec.conformance.harness import Grade, Leave, Run, checks, play, spec_property

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.PREFETCH_BOUND
STEPS = 6  # batches consumed, slowly


@pytest.mark.quick
@spec_property(PROP)
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
    kwargs = {"num_workers": workers, "prefetch_factor": prefetch, "batch_size": 1}
    _check_window(grade, play(loader_cls, n=30, leave={0: Leave("drop", STEPS)}, **_paused(kwargs)))


@spec_property(PROP)
def test_iterable_fetches_never_run_ahead_of_the_window(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, 2 workers with long shards, a slow consumer: after c batches were taken,
    at most c + prefetch_factor * num_workers items have been read from the shards.

    Property: PrefetchBound. Seed (worker loop): a worker reads its shard only when it gets an
    index ("index_queue.get"), and the main process sends at most prefetch_factor * num_workers.
    Guards: G2 pytorch/pytorch#25691 (memory in flight grows with read-ahead), D4 pytorch PR
    #19228 (iterable workers fed by tasks, like map-style ones).
    """
    kwargs = {"num_workers": 2, "prefetch_factor": 2, "batch_size": 1}
    leave = {0: Leave("drop", STEPS)}
    _check_window(grade, play(loader_cls, shards=(15, 15), leave=leave, **_paused(kwargs)))


def _paused(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A slow consumer: after each batch, up to 0.2 s for a fetch past the window."""
    return {"kwargs": kwargs, "pause_s": 0.2, "pause_ahead": checks.prefetch_window(kwargs)}


def _check_window(grade: Grade, r: Run) -> None:
    checks.prefetch_bound(grade, r, STEPS)
    checks.nothing_left(grade, r)
