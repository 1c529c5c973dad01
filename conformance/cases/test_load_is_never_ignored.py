"""LoadIsNeverIgnored (MUST): a loaded state governs the next iter(), whatever was called before
it (iter(), state_dict(), live persistent workers), or the load raises.

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    LOAD,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    errors,
    nothing_left,
    play_resume,
    same_stream,
)
from loaderspec.faultinject.plan import BeforeLoad

from loaderspec.vocabulary import PropertyName


def _plan(before_load: BeforeLoad, persistent: bool) -> ResumePlan:
    return ResumePlan(
        n=12,
        kwargs=kwargs(2, 2, batch_size=2, shuffle=True, persistent_workers=persistent),
        seed=9,
        epochs=2,
        cuts=(Cut(0, 3),),
        before_load=before_load,
    )


def _grade(grade: Grade, loader_cls: type, plan: ResumePlan) -> None:
    r = play_resume(loader_cls, plan, must=LOAD)
    refused = [e for e in errors(r) if e.at == "load"]
    if refused:
        grade.note(f"the load raised, as allowed: {refused[0].text[:120]}")
    else:
        same_stream(grade, r, LOAD)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(LOAD, PropertyName.RESUME_EQUIVALENCE)
def test_load_after_iter_with_live_workers_governs_the_next_iter(
    loader_cls: type, grade: Grade
) -> None:
    """A new loader with persistent workers: iter() and one next() first, then load_state_dict()
    (workers alive): the next iter() resumes from the loaded state, or the load raises.

    Property: LoadIsNeverIgnored. Seed (spec/DataLoaderCheckpoint.tla): a loaded state governs
    the next iter(), whatever was called before it, or the load raises.
    Guards: K7 meta-pytorch/data#1437 (with persistent_workers=True the resumed epochs do not
    follow the state).
    """
    _grade(grade, loader_cls, _plan("iter", persistent=True))


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(LOAD, PropertyName.RESUME_EQUIVALENCE)
def test_load_after_state_dict_governs_the_next_iter(loader_cls: type, grade: Grade) -> None:
    """A new loader: state_dict() first (its state before any iter()), then load_state_dict():
    the next iter() resumes from the loaded state, or the load raises.

    Property: LoadIsNeverIgnored. Seed (spec/DataLoaderCheckpoint.tla): a loaded state governs
    the next iter(), whatever was called before it, or the load raises.
    Guards: K7 meta-pytorch/data#1437 (a resumed loader drops or repeats an epoch).
    """
    _grade(grade, loader_cls, _plan("state_dict", persistent=False))
