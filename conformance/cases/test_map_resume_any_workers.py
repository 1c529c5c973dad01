"""MapResumeAnyWorkers (SHOULD): a map-style state is accepted by a loader with another
num_workers and continues exactly (its sampler order does not depend on the worker count).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
A refusal grades NON-STRICT; a silent wrong stream is a ResumeEquivalence FAIL.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    EQUIVALENCE,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    Run,
    errors,
    nothing_left,
    play_resume,
    resume_plan,
    same_stream,
)

from loaderspec.vocabulary import PropertyName

MAP_ANY_WORKERS = PropertyName.MAP_RESUME_ANY_WORKERS


def accepted(grade: Grade, r: Run) -> None:
    """MapResumeAnyWorkers: the load and the resumed iter() raise nothing (NON-STRICT if one
    does), and the stream is the uninterrupted one's (ResumeEquivalence)."""
    refused = [e for e in errors(r) if e.at in ("load", "iter")]
    if refused:
        e = refused[0]
        after = (resume_plan(r).resume_kwargs or {}).get("num_workers", 0)
        grade.non_strict(
            MAP_ANY_WORKERS,
            None,
            f"a map-style state of num_workers={r.plan.kwargs.get('num_workers', 0)} refused"
            f" with num_workers={after}: {e.at}() raised {e.text[:160]!r}",
        )
        return
    same_stream(grade, r, EQUIVALENCE)


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(MAP_ANY_WORKERS, EQUIVALENCE)
def test_map_style_state_of_two_workers_resumes_with_one(loader_cls: type, grade: Grade) -> None:
    """Map-style, shuffled with a seeded generator, a state after 3 batches with 2 workers,
    loaded into a loader with 1 worker: accepted, the same stream.

    Property: MapResumeAnyWorkers. Seed (spec/DataLoaderCheckpoint.tla): a map-style state is
    accepted under another num_workers (the sampler's order does not depend on it).
    Guards: K7 meta-pytorch/data#1437 (its reproduction resumes with num_workers 0 and 1).
    """
    plan = ResumePlan(
        n=12,
        kwargs=kwargs(2, 2, batch_size=2, shuffle=True),
        seed=5,
        epochs=2,
        cuts=(Cut(0, 3),),
        resume_kwargs=kwargs(1, 2, batch_size=2, shuffle=True),
    )
    r = play_resume(loader_cls, plan)
    accepted(grade, r)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(MAP_ANY_WORKERS, EQUIVALENCE)
def test_map_style_state_of_one_worker_resumes_with_three(loader_cls: type, grade: Grade) -> None:
    """Map-style, a state at the end of epoch 0 with 1 worker, loaded into a loader with 3
    workers: accepted, epoch 1 whole.

    Property: MapResumeAnyWorkers. Seed (spec/DataLoaderCheckpoint.tla): a map-style state is
    accepted under another num_workers.
    Guards: K7 meta-pytorch/data#1437 (a state saved at an epoch's end, resumed elsewhere).
    """
    plan = ResumePlan(
        n=9,
        kwargs=kwargs(1, 2, batch_size=2),
        epochs=2,
        cuts=(Cut(0, how="end"),),
        resume_kwargs=kwargs(3, 2, batch_size=2),
    )
    r = play_resume(loader_cls, plan)
    accepted(grade, r)
    nothing_left(grade, r)
