"""CheckpointIsHandedOut (MUST): a state counts exactly the batches handed out, whatever is
buffered, in flight or queued (and an epoch that raised StopIteration as over).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs, spec_property
from loaderspec.conformance.harness.resume import (
    EQUIVALENCE,
    HANDED_OUT,
    MOST_ITERATORS,
    Cut,
    ResumePlan,
    nothing_left,
    play_resume,
    same_stream,
)
from loaderspec.faultinject.user_state import UserKind


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE)
@pytest.mark.parametrize("persistent", [False, True])
def test_state_at_an_epoch_end_resumes_at_the_next_epoch(
    loader_cls: type, grade: Grade, persistent: bool
) -> None:
    """A shuffled loader, 2 workers, 3 epochs: the state taken after epoch 0's StopIteration
    resumes with epoch 1, whole (neither epoch 0 again nor epoch 1 skipped).

    Property: CheckpointIsHandedOut. Seed (spec/DataLoaderCheckpoint.tla): an epoch that raised
    StopIteration counts as over in the state taken after it.
    Guards: K7 meta-pytorch/data#1437 -> PR #1439 (a state saved at an epoch's end drops or
    repeats an epoch), huggingface/datasets#7447, google/grain#572 (stopping and resuming a
    grain DataLoader at each epoch's end).
    """
    plan = ResumePlan(
        n=10,
        kwargs=kwargs(2, 2, batch_size=2, shuffle=True, persistent_workers=persistent),
        seed=11,
        epochs=3,
        cuts=(Cut(0, how="end"),),
    )
    r = play_resume(loader_cls, plan, must=HANDED_OUT)
    same_stream(grade, r, HANDED_OUT)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE)
@pytest.mark.parametrize("dataset_state", [False, True])
def test_state_counts_handed_out_batches_not_prefetched_ones(
    loader_cls: type, grade: Grade, dataset_state: bool
) -> None:
    """IterableDataset, 2 workers, prefetch 2 (up to 4 batches ahead): the state taken after 1
    batch resumes with the 2nd, not past the prefetched ones nor from the start.

    Property: CheckpointIsHandedOut. Seed (spec/DataLoaderCheckpoint.tla): a checkpoint is what
    was handed out; prefetched items are produced again.
    Guards: K8 meta-pytorch/data#1520 (prefetched-but-unyielded samples discarded or replayed
    on resume).
    """
    plan = ResumePlan(
        shards=(6, 5),
        dataset_state=dataset_state,
        kwargs=kwargs(2, 2, batch_size=2),
        epochs=2,
        cuts=(Cut(0, 1),),
    )
    r = play_resume(loader_cls, plan, must=HANDED_OUT)
    same_stream(grade, r, HANDED_OUT)
    nothing_left(grade, r)


@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE)
@pytest.mark.parametrize(
    "user", [pytest.param("prefetched_iterable", marks=pytest.mark.quick), "slow_first_map"]
)
def test_batches_fetched_and_waiting_at_the_state_are_handed_out_after_the_resume(
    loader_cls: type, grade: Grade, user: UserKind
) -> None:
    """2 workers, prefetch 2, batch size 1, iterable or map-style: worker 0's first item waits
    (bounded) until worker 1 has fetched its 2 items, so the state taken after 1 batch is
    taken with 2 batches fetched and waiting, every run: they are handed out after the resume.

    Property: CheckpointIsHandedOut. Seed (spec/DataLoaderCheckpoint.tla): a checkpoint is what
    was handed out, never what was dispatched or prefetched.
    Guards: K8 meta-pytorch/data#1520 (prefetched-but-unyielded samples discarded on resume);
    a state counting how far a worker fetched (caught by timing alone before: 4 of 5 runs).
    """
    plan = ResumePlan(
        n=8, user=user, kwargs=kwargs(2, 2, batch_size=1), epochs=2, cuts=(Cut(0, 1),)
    )
    r = play_resume(loader_cls, plan, must=HANDED_OUT)
    same_stream(grade, r, HANDED_OUT)
    nothing_left(grade, r)


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@spec_property(HANDED_OUT, EQUIVALENCE)
def test_a_state_after_reordered_batches_resumes_what_was_not_handed_out(
    loader_cls: type, grade: Grade
) -> None:
    """in_order=False, 2 workers, prefetch 2, batch size 1: item 0 waits (bounded) until a
    batch was handed out, so another is handed out before it, every run; the state taken after
    that 1 batch resumes with item 0 and the rest, that batch not again.

    Property: CheckpointIsHandedOut. Seed (spec/DataLoaderCheckpoint.tla): a checkpoint is the
    set of batches handed out (out of order: not a count of positions).
    Guards: D6 pytorch PR #132189 (in_order=False: batches lost or duplicated in the reorder
    buffer); K8 meta-pytorch/data#1520.
    """
    plan = ResumePlan(
        n=8,
        user="reordered_map",
        kwargs=kwargs(2, 2, batch_size=1, in_order=False),
        epochs=2,
        cuts=(Cut(0, 1),),
    )
    r = play_resume(loader_cls, plan, must=HANDED_OUT)
    same_stream(grade, r, HANDED_OUT)
    nothing_left(grade, r)
