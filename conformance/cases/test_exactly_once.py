"""ExactlyOnce (MUST): an epoch that ends in StopIteration has handed out every task once, and an
IterableDataset epoch ends only once every worker's shard has ended."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.harness import Grade, checks, kwargs, play

PROP = "ExactlyOnce"

# Few examples: each one starts worker processes (a second or so on two cores). derandomize keeps
# runs reproducible; database=None keeps the suite from writing .hypothesis/ where it is run.
FEW = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _expected_batches(n: int, bs: int, drop_last: bool) -> list[list[int]]:
    out = [list(range(i, min(i + bs, n))) for i in range(0, n, bs)]
    return [b for b in out if len(b) == bs] if drop_last else out


@pytest.mark.quick
@pytest.mark.spec_property(PROP, "InOrderDelivery")
@FEW
@given(
    n=st.integers(0, 23),
    bs=st.integers(1, 5),
    drop_last=st.booleans(),
    workers=st.integers(0, 3),
    prefetch=st.integers(1, 3),
    in_order=st.booleans(),
)
def test_map_style_epoch_hands_out_every_batch_once(
    loader_cls: type,
    grade: Grade,
    n: int,
    bs: int,
    drop_last: bool,
    workers: int,
    prefetch: int,
    in_order: bool,
) -> None:
    """Map-style, any size / batch size / drop_last / workers / prefetch: each batch once.

    Property: ExactlyOnce (and InOrderDelivery when in_order=True). Seed (dataloader.py):
    "tasks_outstanding" counts each task sent until its result is handed out.
    Guards: D6 pytorch PR #132189 (lost or duplicated batches in the reorder buffer).
    """
    r = play(
        loader_cls,
        n=n,
        kwargs=kwargs(workers, prefetch, batch_size=bs, drop_last=drop_last, in_order=in_order),
    )
    expected = _expected_batches(n, bs, drop_last)
    got = r.batches() if in_order else sorted(r.batches())
    if got != expected or not r.of(0, "stop"):
        grade.fail(PROP, f"{expected} then StopIteration", f"{r.batches()} then {r.last()}")
    checks.nothing_left(grade, r)


@pytest.mark.spec_property(PROP)
@FEW
@given(
    shards=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    bs=st.integers(1, 3),
    prefetch=st.integers(1, 3),
)
def test_iterable_epoch_hands_out_every_item_once(
    loader_cls: type, grade: Grade, shards: list[int], bs: int, prefetch: int
) -> None:
    """IterableDataset, one shard per worker of any length: every item exactly once.

    Property: ExactlyOnce. Seed (worker loop): a worker's iterator ends with
    "_IterableDatasetStopIteration", and only then is the worker retired.
    Guards: D2 pytorch/pytorch#33413 (per-worker partial batches), D4 pytorch PR #19228.
    """
    r = play(
        loader_cls,
        shards=tuple(shards),
        kwargs=kwargs(len(shards), prefetch, batch_size=bs),
    )
    expected = sorted(w * 1_000_000 + k for w, length in enumerate(shards) for k in range(length))
    if sorted(r.items()) != expected or not r.of(0, "stop"):
        grade.fail(PROP, f"{expected}", f"{sorted(r.items())} then {r.last()}")
    checks.nothing_left(grade, r)


@pytest.mark.quick
@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_the_batches_handed_out(
    loader_cls: type, grade: Grade, drop_last: bool
) -> None:
    """len(loader) of a map-style loader equals the number of batches an epoch hands out.

    Property: ExactlyOnce. Seed (DataLoader.__len__): "return len(self._index_sampler)".
    Guards: D2 pytorch/pytorch#33413 (fewer batches than len(dl) promises).
    """
    r = play(
        loader_cls,
        n=11,
        len_of_loader=True,
        kwargs=kwargs(2, 2, batch_size=3, drop_last=drop_last),
    )
    expected = 11 // 3 if drop_last else math.ceil(11 / 3)
    length = r.first("len", epoch=None)
    got = None if length is None else length["value"]
    if got != expected or len(r.batches()) != expected:
        grade.fail(
            PROP, f"len {expected} and {expected} batches", f"len {got}, {len(r.batches())} batches"
        )
    checks.nothing_left(grade, r)


@pytest.mark.spec_property(PROP)
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_every_start_method_hands_out_every_batch(
    loader_cls: type, grade: Grade, method: str
) -> None:
    """multiprocessing_context fork, spawn and forkserver: the same complete epoch.

    Property: ExactlyOnce. Seed (DataLoader docs): "If the spawn start method is used,
    worker_init_fn cannot be an unpicklable object" - the protocol is the same in every context.
    Guards: J5 pytorch/pytorch#101327 (spawn default), H4 pytorch#22585 (forkserver pickling).
    """
    r = play(
        loader_cls,
        deadline_s=90.0,
        n=6,
        kwargs=kwargs(2, 2, batch_size=2, multiprocessing_context=method),
    )
    if r.batches() != [[0, 1], [2, 3], [4, 5]]:
        grade.fail(PROP, "[[0, 1], [2, 3], [4, 5]]", f"{r.batches()} then {r.last()}")
    checks.nothing_left(grade, r)
