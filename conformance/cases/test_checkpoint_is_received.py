"""CheckpointIsReceived (MUST): a state, when returned, is what the user received (the user's
epoch and the batches next() returned in it), whatever the loader's own count of them says.

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
From outside, a state's meaning is what a loader resumed from it hands out next: exactly the
batches the user did not receive.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    EQUIVALENCE,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    nothing_left,
    play_resume,
    same_stream,
)

from loaderspec.vocabulary import PropertyName

RECEIVED = PropertyName.CHECKPOINT_IS_RECEIVED


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(RECEIVED, EQUIVALENCE)
def test_state_taken_twice_in_a_row_is_what_the_user_received(
    loader_cls: type, grade: Grade
) -> None:
    """Map-style, 2 workers, prefetch 2 (4 batches ahead): state_dict() twice after 3 batches, no
    next() between; the second state resumes with the 4th batch (the first call changed nothing
    the user received).

    Property: CheckpointIsReceived. Seed (spec/DataLoaderCheckpoint.tla): a state, when
    returned, is what the user received, not the loader's own count.
    Guards: K8 meta-pytorch/data#1520 (a state that counts the prefetched batches loses them).
    """
    plan = ResumePlan(
        n=12,
        kwargs=kwargs(2, 2, batch_size=1),
        epochs=1,
        cuts=(Cut(0, 3, earlier=3),),
    )
    r = play_resume(loader_cls, plan, must=RECEIVED)
    same_stream(grade, r, RECEIVED)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(RECEIVED, EQUIVALENCE)
def test_iterable_state_is_what_the_user_received(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, shards of 6 and 5 items, 2 workers, prefetch 2: the state taken after 2
    batches resumes with the 3rd, each shard where the user left it.

    Property: CheckpointIsReceived. Seed (spec/DataLoaderCheckpoint.tla): a state, when
    returned, is what the user received, not the loader's own count.
    Guards: K8 meta-pytorch/data#1520 (an iterable's state is per worker: prefetched samples
    discarded or replayed).
    """
    plan = ResumePlan(
        shards=(6, 5),
        kwargs=kwargs(2, 2, batch_size=2),
        epochs=1,
        cuts=(Cut(0, 2),),
    )
    r = play_resume(loader_cls, plan, must=RECEIVED)
    same_stream(grade, r, RECEIVED)
    nothing_left(grade, r)
