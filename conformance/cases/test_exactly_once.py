"""ExactlyOnce (MUST): an epoch that ends in StopIteration has handed out every task once, and an
IterableDataset epoch ends only once every worker's shard has ended."""

from __future__ import annotations

import math

import pytest
from hypothesis import strategies as st
from loaderspec.conformance.harness import Grade, Plan, checks, kwargs, play, spec_property
from loaderspec.conformance.harness.batching import (
    MORE_PICKS,
    QUICK_PICKS,
    Config,
    compare,
    configs,
)
from loaderspec.conformance.harness.drawn import MORE_EXAMPLES, QUICK_EXAMPLES, check_drawn, played
from loaderspec.faultinject.events import Len, Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.EXACTLY_ONCE


def _expected_batches(n: int, bs: int, drop_last: bool) -> list[list[int]]:
    out = [list(range(i, min(i + bs, n))) for i in range(0, n, bs)]
    return [b for b in out if len(b) == bs] if drop_last else out


def _map_plan(
    n: int, bs: int, drop_last: bool, workers: int, prefetch: int, in_order: bool
) -> Plan:
    return Plan(
        n=n,
        kwargs=kwargs(workers, prefetch, batch_size=bs, drop_last=drop_last, in_order=in_order),
    )


MAP_CONFIGS = st.tuples(
    st.integers(0, 23),  # n
    st.integers(1, 5),  # batch size
    st.booleans(),  # drop_last
    st.integers(0, 3),  # workers
    st.integers(1, 3),  # prefetch
    st.booleans(),  # in_order
)


@pytest.mark.quick
@spec_property(PROP, PropertyName.IN_ORDER_DELIVERY)
def test_map_style_epoch_hands_out_every_batch_once(loader_cls: type, grade: Grade) -> None:
    """Map-style, any size / batch size / drop_last / workers / prefetch: each batch once.

    Property: ExactlyOnce (and InOrderDelivery when in_order=True). Seed (dataloader.py):
    "tasks_outstanding" counts each task sent until its result is handed out.
    Guards: D6 pytorch PR #132189 (lost or duplicated batches in the reorder buffer).
    """

    def one(config: tuple[int, int, bool, int, int, bool]) -> None:
        n, bs, drop_last, _, _, in_order = config
        r = played(play(loader_cls, _map_plan(*config), leaks=False, skip_refused=False))
        expected = _expected_batches(n, bs, drop_last)
        got = r.batches() if in_order else sorted(r.batches())
        if got != expected or not r.of(0, Stop):
            grade.fail(PROP, f"{expected} then StopIteration", f"{r.batches()} then {r.last()}")

    last = check_drawn(MAP_CONFIGS, one, examples=6)
    checks.nothing_left(grade, play(loader_cls, _map_plan(*last)))


ITERABLE_CONFIGS = st.tuples(
    st.lists(st.integers(0, 6), min_size=1, max_size=3),  # shards, one per worker
    st.integers(1, 3),  # batch size
    st.integers(1, 3),  # prefetch
)


def _iterable_plan(shards: list[int], bs: int, prefetch: int) -> Plan:
    return Plan(shards=tuple(shards), kwargs=kwargs(len(shards), prefetch, batch_size=bs))


@spec_property(PROP)
def test_iterable_epoch_hands_out_every_item_once(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, one shard per worker of any length: every item exactly once.

    Property: ExactlyOnce. Seed (worker loop): a worker's iterator ends with
    "_IterableDatasetStopIteration", and only then is the worker retired.
    Guards: D2 pytorch/pytorch#33413 (per-worker partial batches), D4 pytorch PR #19228.
    """

    def one(config: tuple[list[int], int, int]) -> None:
        shards = config[0]
        r = played(play(loader_cls, _iterable_plan(*config), leaks=False, skip_refused=False))
        expected = sorted(
            w * 1_000_000 + k for w, length in enumerate(shards) for k in range(length)
        )
        if sorted(r.items()) != expected or not r.of(0, Stop):
            grade.fail(PROP, f"{expected}", f"{sorted(r.items())} then {r.last()}")

    last = check_drawn(ITERABLE_CONFIGS, one, examples=6)
    checks.nothing_left(grade, play(loader_cls, _iterable_plan(*last)))


def _batches_like_torch(
    loader_cls: type, grade: Grade, examples: int, picks: tuple[Config, ...]
) -> None:
    def one(config: Config) -> None:
        r = played(play(loader_cls, config.plan(), leaks=False, skip_refused=False))
        compare(grade, config, r)

    last = check_drawn(configs(), one, examples=examples, picks=picks)
    checks.nothing_left(grade, play(loader_cls, last.plan()))


@pytest.mark.quick
@spec_property(
    PROP, PropertyName.IN_ORDER_DELIVERY, PropertyName.NO_DUPLICATE_DELIVERY, PropertyName.TYPE_OK
)
def test_batches_are_torchs_for_drawn_configurations(loader_cls: type, grade: Grade) -> None:
    """Drawn configurations (map or iterable; batch_size incl. None; drop_last; shuffle with or
    without a seeded generator; an explicit sampler or batch_sampler; a custom collate_fn;
    worker_init_fn; 0-3 workers; prefetch 1-4; persistent; in order or not; 1-3 epochs): the
    batches torch's single-process path gives (a multiset with in_order=False).

    Property: ExactlyOnce (with shuffle: a permutation per epoch, different across epochs), and
    TypeOK for worker info and seeds (base_seed + id). Seed (DataLoader docs): "the
    DataLoader ... supports ... automatic batching, single- and multi-process data loading"
    with the same batches whatever num_workers is.
    Guards: D2 pytorch/pytorch#33413 (drop_last and per-worker batches of an IterableDataset),
    D6 pytorch PR #132189 (in_order), J1 pytorch/pytorch#5059 (worker seeds).
    """
    _batches_like_torch(loader_cls, grade, QUICK_EXAMPLES, QUICK_PICKS)


@spec_property(
    PROP, PropertyName.IN_ORDER_DELIVERY, PropertyName.NO_DUPLICATE_DELIVERY, PropertyName.TYPE_OK
)
def test_batches_are_torchs_for_more_drawn_configurations(loader_cls: type, grade: Grade) -> None:
    """More drawn configurations than the quick selection plays: torch's batches (as in
    test_batches_are_torchs_for_drawn_configurations).

    Property: ExactlyOnce, TypeOK. Seed (DataLoader docs): the same batches whatever
    num_workers is.
    Guards: D2 pytorch/pytorch#33413, D6 pytorch PR #132189, J1 pytorch/pytorch#5059.
    """
    _batches_like_torch(loader_cls, grade, MORE_EXAMPLES, MORE_PICKS)


@pytest.mark.quick
@spec_property(PROP)
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
    length = r.first(Len, epoch=None)
    got = None if length is None else length.length
    if got != expected or len(r.batches()) != expected:
        grade.fail(
            PROP, f"len {expected} and {expected} batches", f"len {got}, {len(r.batches())} batches"
        )
    checks.nothing_left(grade, r)


@spec_property(PROP)
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
