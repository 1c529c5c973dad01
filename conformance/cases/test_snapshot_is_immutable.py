"""SnapshotIsImmutable (MUST): a state, once returned by state_dict(), never changes.

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    EQUIVALENCE,
    IMMUTABLE,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    immutable,
    nothing_left,
    play_resume,
    same_stream,
)


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(IMMUTABLE, EQUIVALENCE)
def test_a_state_taken_earlier_in_the_epoch_stays_as_returned(
    loader_cls: type, grade: Grade
) -> None:
    """Two states in one epoch (after 1 and after 4 batches, then 2 more batches): the first
    still pickles as returned, and resuming from it hands out batch 2 on.

    Property: SnapshotIsImmutable. Seed (spec/DataLoaderCheckpoint.tla): a state is a value
    taken when state_dict() returns, not a view of the loader's live state.
    Guards: K7 meta-pytorch/data#1437 (a second checkpoint within an epoch misaligned).
    """
    plan = ResumePlan(
        n=12,
        kwargs=kwargs(2, 2, batch_size=2, shuffle=True),
        seed=3,
        epochs=2,
        cuts=(Cut(0, 4, earlier=1, resume_from="earlier", later=2),),
    )
    r = play_resume(loader_cls, plan, must=IMMUTABLE)
    immutable(grade, r)
    same_stream(grade, r, IMMUTABLE)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(IMMUTABLE, EQUIVALENCE)
def test_a_state_survives_pickle_and_the_loader_going_on(loader_cls: type, grade: Grade) -> None:
    """IterableDataset with a state of its own, 1 worker: the state taken after 2 batches pickles
    the same once 3 more batches were handed out and the loader was dropped, and resumes at the
    3rd (whether torch.load(weights_only=True) reads it back is noted).

    Property: SnapshotIsImmutable. Seed (spec/DataLoaderCheckpoint.tla): a state, once returned,
    never changes.
    Guards: K8 meta-pytorch/data#1520 (a worker's dataset state and the batches it prefetched).
    """
    plan = ResumePlan(
        shards=(9,),
        dataset_state=True,
        kwargs=kwargs(1, 2, batch_size=2),
        epochs=1,
        cuts=(Cut(0, 2, later=3),),
    )
    r = play_resume(loader_cls, plan, must=IMMUTABLE)
    immutable(grade, r)
    same_stream(grade, r, IMMUTABLE)
    nothing_left(grade, r)
