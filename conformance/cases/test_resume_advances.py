"""ResumeAdvances (MUST): a state taken after a resume is later than the one loaded, and every
epoch after the resumed one is whole.

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    ADVANCES,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    nothing_left,
    play_resume,
    same_stream,
)

from loaderspec.vocabulary import PropertyName


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(ADVANCES, PropertyName.RESUME_EQUIVALENCE)
def test_a_state_taken_soon_after_a_resume_is_later_than_the_loaded_one(
    loader_cls: type, grade: Grade
) -> None:
    """3 workers: resume from a state after 4 batches, take a state right after the load, resume
    from it, take one after 1 more batch (fewer than num_workers), resume again: the stream goes
    on from batch 5, then 6, never back to the first state.

    Property: ResumeAdvances. Seed (spec/DataLoaderCheckpoint.tla): a state taken after a
    resume is later than the one loaded.
    Guards: K7 meta-pytorch/data#1437 (a second resume within an epoch misaligned).
    """
    plan = ResumePlan(
        n=14,
        kwargs=kwargs(3, 1, batch_size=1),
        epochs=2,
        cuts=(Cut(0, 4), Cut(how="after_load"), Cut(0, 1)),
    )
    r = play_resume(loader_cls, plan, must=ADVANCES)
    same_stream(grade, r, ADVANCES)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(ADVANCES, PropertyName.RESUME_EQUIVALENCE)
@pytest.mark.parametrize(("persistent", "iterable"), [(True, False), (False, False), (True, True)])
def test_every_epoch_after_the_resumed_one_is_whole(
    loader_cls: type, grade: Grade, persistent: bool, iterable: bool
) -> None:
    """Resumed after 3 batches of epoch 0, then 2 more epochs: epochs 1 and 2 are whole (not
    only the remainder of the interrupted one), persistent workers or not, map-style (shuffled)
    or an IterableDataset with a state of its own kept by persistent workers.

    Property: ResumeAdvances. Seed (spec/DataLoaderCheckpoint.tla): every epoch after the
    resumed one is whole.
    Guards: K7 meta-pytorch/data#1437, huggingface/datasets#7447 (with persistent_workers,
    post-resume epochs cover only the remainder of the interrupted epoch).
    """
    plan = ResumePlan(
        n=10,
        shards=(5, 4) if iterable else None,
        dataset_state=iterable,
        kwargs=kwargs(2, 2, batch_size=2, shuffle=not iterable, persistent_workers=persistent),
        seed=None if iterable else 21,
        epochs=3,
        cuts=(Cut(0, 3),),
    )
    r = play_resume(loader_cls, plan, must=ADVANCES)
    same_stream(grade, r, ADVANCES)
    nothing_left(grade, r)
