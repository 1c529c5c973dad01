"""ResumeEquivalence (MUST) with the user's own state: datasets, dataset iterators and samplers
that save themselves (torchdata's `Stateful` protocol, `faultinject.user_state`) and items or
orders drawn from torch's RNG. A resumed run hands out the uninterrupted run's batches item for
item and value for value, whatever the dataset, its iterator, the sampler or the RNG drew.

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

from typing import Any

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    ADVANCES,
    EQUIVALENCE,
    HANDED_OUT,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    nothing_left,
    play_resume,
    same_stream,
)

from loaderspec.vocabulary import PropertyName

# The user's restart: torch.manual_seed(SEED) before every loader is built.
SEED = 3
MID = (Cut(1, 2),)  # 2 batches into epoch 1: what epoch 0 moved must be restored too
AT_END = (Cut(0, how="end"),)  # after epoch 0's StopIteration
MOMENTS = {
    "mid-epoch": MID,
    "after-iter": (Cut(1, 0),),  # epoch 1's iter(), before its first batch
    "at-end": AT_END,
    "after-load": (Cut(0, how="end"), Cut(how="after_load")),  # between a load and iter()
}


def quick(*values: object) -> object:
    """A parameter set of the quick selection (`-m quick`)."""
    return pytest.param(*values, marks=pytest.mark.quick)


def _play(loader_cls: type, grade: Grade, prop: PropertyName, **plan: Any) -> None:
    r = play_resume(loader_cls, ResumePlan(global_seed=SEED, **plan), must=prop)
    same_stream(grade, r, prop)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(EQUIVALENCE, HANDED_OUT)
@pytest.mark.parametrize(
    ("workers", "moment"), [quick(0, "mid-epoch"), quick(0, "after-iter"), (2, "mid-epoch")]
)
def test_a_dataset_that_is_its_own_iterator_resumes_where_it_was(
    loader_cls: type, grade: Grade, workers: int, moment: str
) -> None:
    """An IterableDataset whose `__iter__` resets its position and returns itself, with a
    state_dict (its position and an epoch counter advanced when its iteration ends), 2 epochs:
    resumed mid-epoch 1 or between epoch 1's iter() and its first batch, it goes on where it
    was (its state restored after `iter(dataset)`, as StatefulDataLoader orders it).

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): datasets "that implement
    state_dict and load_state_dict" are checkpointed and restored.
    Guards: K8 meta-pytorch/data#1520 (a dataset's own state and what it handed out); the
    reference's until 2026-11-28: a state loaded before `iter(dataset)`, which resets it (the
    epoch replayed), a state after iter() with no dataset state (0 batches resumed).
    """
    _play(
        loader_cls,
        grade,
        EQUIVALENCE,
        n=6,
        user="self_iterating",
        kwargs=kwargs(workers, 1, batch_size=2, persistent_workers=bool(workers)),
        epochs=2,
        cuts=MOMENTS[moment],
    )


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE, ADVANCES)
@pytest.mark.parametrize(
    ("user", "workers", "moment"),
    [
        quick("epoch_counting", 0, "at-end"),
        ("epoch_counting", 2, "at-end"),
        ("self_iterating", 0, "after-load"),
    ],
)
def test_a_dataset_state_advanced_at_an_epochs_end_is_kept(
    loader_cls: type, grade: Grade, user: str, workers: int, moment: str
) -> None:
    """An IterableDataset that advances an epoch counter when its iteration ends (its items
    carry it), 3 epochs: a state after epoch 0's StopIteration (and one taken right after that
    state was loaded, before iter()) resumes with epoch 1's items, not epoch 0's again.

    Property: CheckpointIsHandedOut. Seed (spec/DataLoaderCheckpoint.tla): an epoch that raised
    StopIteration counts as over in the state taken after it; the dataset's state with it.
    Guards: K7 meta-pytorch/data#1437 (a state saved at an epoch's end drops or repeats an
    epoch); the reference's until 2026-11-28: the dataset's own state dropped at an epoch's end.
    """
    _play(
        loader_cls,
        grade,
        HANDED_OUT,
        n=6,
        user=user,
        kwargs=kwargs(workers, 1, batch_size=2, persistent_workers=bool(workers)),
        epochs=3,
        cuts=MOMENTS[moment],
    )


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(EQUIVALENCE)
@pytest.mark.parametrize("workers", [quick(0), 2])
def test_an_iterators_own_state_is_resumed(loader_cls: type, grade: Grade, workers: int) -> None:
    """An IterableDataset whose iter() returns an iterator with a state_dict of its own (a
    generator seeded from torch's RNG when it is made: its draws are the items), 2 epochs, a
    state 2 batches into epoch 1: the resumed items are the uninterrupted run's values.

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): the dataset iterator's
    state is saved when it implements state_dict.
    Guards: K8 meta-pytorch/data#1520 (a fast-forward by count is not the iterator's state);
    the reference's until 2026-11-28: an iterator's own state ignored.
    """
    _play(
        loader_cls,
        grade,
        EQUIVALENCE,
        n=8,
        user="iterator_state",
        kwargs=kwargs(workers, 1, batch_size=2),
        epochs=2,
        cuts=MID,
    )


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(EQUIVALENCE)
@pytest.mark.parametrize(
    ("user", "workers", "seed"),
    [quick("random_items", 0, None), ("random_items", 2, 9), quick("map_state", 2, None)],
)
def test_map_style_items_keep_their_values_after_a_resume(
    loader_cls: type, grade: Grade, user: str, workers: int, seed: int | None
) -> None:
    """Map-style items drawn from torch's RNG (the loader's process, or each worker's seeded
    RNG; shuffled from a user generator), 2 epochs, a state after epoch 0's StopIteration; or
    counting the dataset copy's own fetches (a state_dict), a state 2 batches into epoch 1:
    the same values as uninterrupted. (Mid-epoch, draws from an RNG nobody saves are not held
    to this: a worker's RNG has moved on by the batches it prefetched, and only fetching the
    handed-out items again would bring it back; StatefulDataLoader does not either.)

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): the map-style dataset's
    state and the workers' base seed are restored.
    Guards: J1 pytorch/pytorch#5059 (randomness that is not the user's to control); the
    reference's until 2026-11-28: worker seeds and a map-style dataset's own state not saved.
    """
    _play(
        loader_cls,
        grade,
        EQUIVALENCE,
        n=8,
        user=user,
        kwargs=kwargs(workers, 1, batch_size=2, shuffle=seed is not None),
        seed=seed,
        epochs=2,
        cuts=AT_END if user == "random_items" else MID,
    )


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE)
@pytest.mark.parametrize("workers", [quick(0), 2])
def test_a_shuffle_from_the_global_rng_resumes_in_its_epochs_order(
    loader_cls: type, grade: Grade, workers: int
) -> None:
    """shuffle=True without a generator (the order drawn from torch's global RNG), the user's
    restart seeding it the same: a state after epoch 0's StopIteration resumes epoch 1 in
    epoch 1's order, not epoch 0's again.

    Property: CheckpointIsHandedOut. Seed (torchdata, StatefulDataLoader): the sampler's
    generator state is saved with the loader's.
    Guards: K7 meta-pytorch/data#1437 (its scenario: shuffle=True, no generator); the
    reference's until 2026-11-28: an end-of-epoch state with no RNG (epoch 0's order again).
    """
    _play(
        loader_cls,
        grade,
        HANDED_OUT,
        n=8,
        kwargs=kwargs(workers, 1, batch_size=2, shuffle=True),
        epochs=2,
        cuts=AT_END,
    )


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(EQUIVALENCE)
@pytest.mark.parametrize(
    ("user", "workers"),
    [quick("stateful_sampler", 0), ("stateful_sampler", 2), ("seeded_sampler_iter", 2)],
)
def test_a_samplers_own_state_is_resumed(
    loader_cls: type, grade: Grade, user: str, workers: int
) -> None:
    """A sampler with a state_dict (an epoch counter: each iter() a new order), or a sampler
    whose iterator draws its seed from torch's global RNG and saves it, 2 epochs, a state 2
    batches into epoch 1: the resumed epoch goes on in epoch 1's order.

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): the sampler and the
    sampler iterator are saved when they implement state_dict.
    Guards: K8 meta-pytorch/data#1520 (a fast-forward by count); the reference's until
    2026-11-28: a sampler re-drawn from scratch and fast-forwarded by count.
    """
    _play(
        loader_cls,
        grade,
        EQUIVALENCE,
        n=8,
        user=user,
        kwargs=kwargs(workers, 1, batch_size=2),
        epochs=2,
        cuts=MID,
    )
