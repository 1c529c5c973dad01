"""ResumeEquivalence (MUST): what was handed out before a checkpoint, then what the resumed
loader hands out, is what an uninterrupted run of the same loader hands out (the same sequence
with in_order=True, the same multiset per epoch otherwise).

For loaders with state_dict()/load_state_dict() (others SKIP); spec/DataLoaderCheckpoint.tla.
"""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, Raise, kwargs, spec_property
from loaderspec.conformance.harness.drawn import QUICK_EXAMPLES, check_drawn
from loaderspec.conformance.harness.resume import (
    ADVANCES,
    EQUIVALENCE,
    HANDED_OUT,
    IMMUTABLE,
    Cut,
    ResumePlan,
    configs,
    drawn_iterators,
    immutable,
    needs_state,
    nothing_left,
    play_resume,
    same_stream,
)

PICKS = (
    # shuffled, 2 workers, a state mid-epoch 0 (fewer batches than are prefetched)
    ResumePlan(n=12, kwargs=kwargs(2, 2, batch_size=2, shuffle=True), seed=5, cuts=(Cut(0, 1),)),
    # an item raises in its turn; the state is taken right after that error (after a fault)
    ResumePlan(
        n=10,
        kwargs=kwargs(2, 2, batch_size=2),
        epochs=2,
        cuts=(Cut(0, 2),),
        faults=(Raise(3),),
    ),
    # shuffled, one process, a state right after epoch 1's iter(), before its first batch (the
    # reference's own bug until 2026-11-28: epoch 1 resumed in epoch 0's order)
    ResumePlan(
        n=8, kwargs=kwargs(0, batch_size=2, shuffle=True), seed=5, epochs=2, cuts=(Cut(1, 0),)
    ),
    # iterable shards with a state of their own, a break in epoch 1
    ResumePlan(
        shards=(5, 3),
        dataset_state=True,
        kwargs=kwargs(2, 1, batch_size=2),
        epochs=2,
        cuts=(Cut(1, 2, "break"),),
    ),
)

# The user's own state (faultinject.user_state), the user's restart seeding torch's RNG: each a
# second shape of scenario for what conformance/cases/test_resume_user_state.py checks.
USER_PICKS = (
    # a dataset that is its own iterator: a state mid-epoch 1, and one right after epoch 1's iter()
    ResumePlan(
        n=6,
        user="self_iterating",
        global_seed=4,
        kwargs=kwargs(0, batch_size=2),
        epochs=2,
        cuts=(Cut(1, 1),),
    ),
    ResumePlan(
        n=6,
        user="self_iterating",
        global_seed=4,
        kwargs=kwargs(0, batch_size=2),
        epochs=2,
        cuts=(Cut(1, 0),),
    ),
    # an epoch counter advanced at the iteration's end, 2 persistent workers, a state at the end
    ResumePlan(
        n=6,
        user="epoch_counting",
        global_seed=4,
        kwargs=kwargs(2, 2, batch_size=1, persistent_workers=True),
        epochs=2,
        cuts=(Cut(0, how="end"),),
    ),
    # an iterator seeded from torch's RNG when made, 1 worker, a state mid-epoch 1
    ResumePlan(
        n=6,
        user="iterator_state",
        global_seed=4,
        kwargs=kwargs(1, 2, batch_size=1),
        epochs=2,
        cuts=(Cut(1, 2),),
    ),
    # shuffled from torch's global RNG, a state at epoch 0's end, resumed with 3 epochs to go
    ResumePlan(
        n=6,
        global_seed=4,
        kwargs=kwargs(2, 1, batch_size=2, shuffle=True),
        epochs=2,
        cuts=(Cut(0, how="end"),),
    ),
    # a map-style dataset counting its fetches; a sampler with an epoch counter (one process)
    ResumePlan(
        n=6,
        user="map_state",
        global_seed=4,
        kwargs=kwargs(3, 1, batch_size=1),
        epochs=2,
        cuts=(Cut(1, 4),),
    ),
    ResumePlan(
        n=6,
        user="stateful_sampler",
        global_seed=4,
        kwargs=kwargs(0, batch_size=2),
        epochs=2,
        cuts=(Cut(1, 1),),
    ),
)

# The whole suite's drawn examples: fewer than MORE_EXAMPLES (each plays up to 8 iterators).
MORE_RESUME_EXAMPLES = 8


def _one(loader_cls: type, grade: Grade, plan: ResumePlan) -> None:
    r = play_resume(loader_cls, plan, leaks=False, skip_refused=False)
    same_stream(grade, r)
    immutable(grade, r)


def _drawn(loader_cls: type, grade: Grade, examples: int, picks: tuple[ResumePlan, ...]) -> None:
    needs_state(loader_cls)
    last = check_drawn(
        configs(), lambda plan: _one(loader_cls, grade, plan), examples=examples, picks=picks
    )
    r = play_resume(loader_cls, last)  # leaks, once, on the last example
    nothing_left(grade, r)


@pytest.mark.quick
@pytest.mark.iterators(drawn_iterators(QUICK_EXAMPLES, PICKS))
@spec_property(EQUIVALENCE, HANDED_OUT, IMMUTABLE)
def test_resumed_run_hands_out_what_an_uninterrupted_one_does(
    loader_cls: type, grade: Grade
) -> None:
    """Drawn configurations (map or iterable, a dataset with its own state_dict or not, 0-3
    workers, prefetch, persistent, in_order, a seeded shuffle, an item that raises, 1-3 epochs)
    and checkpoint moments (after k batches, right after iter(), after a fault, after a break,
    at an epoch's end, before iter(), twice in one epoch, a second resume fewer than num_workers
    batches later):
    the resumed run hands out what an uninterrupted one does.

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): "a drop in replacement
    for torch.utils.data.DataLoader that implements state_dict and load_state_dict methods,
    enabling mid-epoch checkpointing".
    Guards: K7 meta-pytorch/data#1437 (a state saved at an epoch's end drops or repeats an
    epoch), K8 meta-pytorch/data#1520 (prefetched items lost or replayed on resume),
    huggingface/datasets#7447, google/grain#1178 (a state set on a fresh iterator hands out
    other elements).
    """
    _drawn(loader_cls, grade, QUICK_EXAMPLES, PICKS)


@pytest.mark.iterators(drawn_iterators(MORE_RESUME_EXAMPLES, PICKS[:1] + USER_PICKS))
@spec_property(EQUIVALENCE, HANDED_OUT, IMMUTABLE, ADVANCES)
def test_resumed_run_matches_for_more_drawn_configurations(loader_cls: type, grade: Grade) -> None:
    """More drawn configurations and checkpoint moments than the quick selection plays, and
    picks with the user's own state (a dataset that is its own iterator, an epoch counter, an
    iterator or a sampler that saves itself, a shuffle from torch's global RNG): the resumed
    run hands out what an uninterrupted one does.

    Property: ResumeEquivalence. Seed (torchdata, StatefulDataLoader): "implements state_dict
    and load_state_dict methods, enabling mid-epoch checkpointing".
    Guards: K7 meta-pytorch/data#1437, K8 meta-pytorch/data#1520, huggingface/datasets#7447.
    """
    _drawn(loader_cls, grade, MORE_RESUME_EXAMPLES, PICKS[:1] + USER_PICKS)
