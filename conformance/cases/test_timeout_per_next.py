"""IterationTerminates with `timeout` set: the timeout bounds each next(), not the epoch - here a
user who takes time between next() calls (a training step), where every next() is instant."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, checks, kwargs, play, spec_property
from loaderspec.faultinject.events import Error, Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.ITERATION_TERMINATES


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_timeout_does_not_count_the_users_time_between_batches(
    loader_cls: type, grade: Grade
) -> None:
    """timeout=1.0, 2 workers, cheap items, and 0.4 s of the user's own between next() calls
    (the epoch about 3 s, each next() instant): every batch, no timeout error.

    Property: IterationTerminates. Seed (DataLoader docs): timeout is "the timeout value for
    collecting a batch from workers"; torch passes it to each "_get_data()" of one next().
    Guards: B4 pytorch/pytorch#21554 (timeout semantics: a stuck batch, not a long epoch).
    """
    r = play(
        loader_cls,
        n=8,
        pause_s=0.4,
        pause_ahead=8,  # more than there are items: each pause runs its full 0.4 s
        kwargs=kwargs(2, 1, batch_size=1, timeout=1.0),
    )
    expected = [[i] for i in range(8)]
    if r.of(0, Error) or r.batches() != expected or not r.of(0, Stop):
        errors = [e.text for e in r.of(0, Error)]
        grade.fail(PROP, f"{expected} and no error", f"{r.batches()}, errors {errors}")
    checks.nothing_left(grade, r)
