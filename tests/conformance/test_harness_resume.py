"""The resume player and its grading (`conformance.harness.resume`), played on the reference."""

from __future__ import annotations

from loaderspec.conformance.harness import Grade, Raise, kwargs
from loaderspec.conformance.harness.resume import (
    Cut,
    ResumePlan,
    play_resume,
    resumed,
    same_stream,
    uninterrupted,
)
from loaderspec.faultinject.events import NoState
from loaderspec.reference import DataLoader


def test_a_fault_raised_before_the_break_is_a_run_with_no_state_not_a_loss() -> None:
    """Issue 36's example: item 0 raises in the user's `for` loop before its `break` after 2
    batches, so the interrupted run hands out `[[error]]` and ends with no state, where the
    uninterrupted one hands out `[[error], [1], [2], [3]]`: the run's own outcome (graded up to
    where it ended), not a resume that lost items 1-3."""
    plan = ResumePlan(
        n=4,
        kwargs=kwargs(2, 2, batch_size=1),
        epochs=1,
        cuts=(Cut(0, 2, "break"),),
        faults=(Raise(0),),
    )
    r = play_resume(DataLoader, plan, leaks=False)
    error = ["error InjectedError"]
    assert uninterrupted(r) == {0: [error, [1], [2], [3]]}
    assert resumed(r) == {0: [error]}
    assert [(e.seg, e.epoch, e.after) for e in r.of(None, NoState)] == [(0, 0, 0)]
    grade = Grade(collect=True)
    same_stream(grade, r)
    assert grade.violations == []
    assert grade.notes == [
        "the interrupted run ended at a fault in epoch 0 after 0 batches, before its break:"
        " no state to resume from, graded up to there"
    ]
