"""ResumeTopologyExplicit (SHOULD): resuming with another num_workers continues exactly, or
raises an error naming both counts; never an assert, never a silent wrong stream (that is a
ResumeEquivalence FAIL).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    MOST_ITERATORS,
    TOPOLOGY,
    Cut,
    ResumePlan,
    nothing_left,
    play_resume,
    topology,
)

from loaderspec.vocabulary import PropertyName


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(TOPOLOGY, PropertyName.RESUME_EQUIVALENCE)
@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 3), (2, 0)])
def test_map_style_resumed_with_other_workers_continues_or_says_why(
    loader_cls: type, grade: Grade, before: int, after: int
) -> None:
    """Map-style, a state after 3 batches with num_workers=a, resumed with num_workers=b: the
    same stream, or an error naming a and b (an AssertionError: NON-STRICT).

    Property: ResumeTopologyExplicit. Seed (spec/DataLoaderCheckpoint.tla): resuming with
    another num_workers continues exactly, or raises naming both counts.
    Guards: K7 meta-pytorch/data#1437 (its reproduction resumes with num_workers 0 and 1).
    """
    plan = ResumePlan(
        n=12,
        kwargs=kwargs(before, 2, batch_size=2),
        epochs=2,
        cuts=(Cut(0, 3),),
        resume_kwargs=kwargs(after, 2, batch_size=2),
    )
    r = play_resume(loader_cls, plan)
    topology(grade, r)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(TOPOLOGY, PropertyName.RESUME_EQUIVALENCE)
def test_iterable_resumed_with_other_workers_continues_or_says_why(
    loader_cls: type, grade: Grade
) -> None:
    """IterableDataset (its stream depends on the workers' shards), a state after 2 batches
    with 2 workers, resumed with 1: the same stream, or an error naming 2 and 1.

    Property: ResumeTopologyExplicit. Seed (spec/DataLoaderCheckpoint.tla): never a silent
    wrong stream.
    Guards: K8 meta-pytorch/data#1520 (an iterable's state is per worker: prefetched samples
    discarded or replayed).
    """
    plan = ResumePlan(
        shards=(4, 4),
        kwargs=kwargs(2, 2, batch_size=2),
        epochs=1,
        cuts=(Cut(0, 2),),
        resume_kwargs=kwargs(1, 2, batch_size=2),
    )
    r = play_resume(loader_cls, plan)
    topology(grade, r)
    nothing_left(grade, r)
