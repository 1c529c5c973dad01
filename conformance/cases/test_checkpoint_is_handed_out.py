"""CheckpointIsHandedOut (MUST): a state counts exactly the batches handed out, whatever is
buffered, in flight or queued (and an epoch that raised StopIteration as over).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, kwargs
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


@pytest.mark.quick
@pytest.mark.iterators(MOST_ITERATORS)
@pytest.mark.spec_property(HANDED_OUT, EQUIVALENCE)
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
@pytest.mark.spec_property(HANDED_OUT, EQUIVALENCE)
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
