"""ResumeNeverStalls (MUST): a resumed iterator never waits for a batch its state said was handed
out; it ends its epoch in StopIteration, never in a timeout (nor a hang).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
The cases set a timeout, so a stalled epoch ends in the loader's timeout error, which fails the
case as a hang would (past the scenario's deadline) without waiting for it.
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

STALLS = PropertyName.RESUME_NEVER_STALLS
# The loaders' timeout: far above a batch's time on a loaded machine (a correct loader never
# meets it), short enough that a broken loader's stall costs seconds.
TIMEOUT_S = 6


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(STALLS, EQUIVALENCE)
def test_resumed_map_style_epoch_ends_without_a_timeout(loader_cls: type, grade: Grade) -> None:
    """Map-style, 2 workers, timeout 6 s: resumed after 3 of 8 batches, the epoch hands out the
    other 5 and raises StopIteration (not the timeout: nothing it waits for was skipped).

    Property: ResumeNeverStalls. Seed (spec/DataLoaderCheckpoint.tla): a resumed iterator can
    always hand out, send or end its epoch without a timeout ending the wait.
    Guards: K7 meta-pytorch/data#1437 (a resumed epoch that does not end where it should).
    """
    plan = ResumePlan(
        n=8,
        kwargs=kwargs(2, 1, batch_size=1, timeout=TIMEOUT_S),
        epochs=2,
        cuts=(Cut(0, 3),),
    )
    r = play_resume(loader_cls, plan, must=STALLS)
    same_stream(grade, r, STALLS)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(STALLS, EQUIVALENCE)
def test_resumed_iterable_epoch_ends_without_a_timeout(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, shards of 4 and 3 items, 2 workers, timeout 6 s: resumed after 2
    batches, the epoch hands out the rest and raises StopIteration.

    Property: ResumeNeverStalls. Seed (spec/DataLoaderCheckpoint.tla): a resumed iterator never
    waits for what the state said was handed out.
    Guards: K8 meta-pytorch/data#1520 (an iterable's resumed state per worker).
    """
    plan = ResumePlan(
        shards=(4, 3),
        kwargs=kwargs(2, 1, batch_size=1, timeout=TIMEOUT_S),
        epochs=1,
        cuts=(Cut(0, 2),),
    )
    r = play_resume(loader_cls, plan, must=STALLS)
    same_stream(grade, r, STALLS)
    nothing_left(grade, r)
