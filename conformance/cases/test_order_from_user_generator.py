"""OrderFromUserGenerator (MUST): a shuffled epoch's order is drawn from the generator the loader
was given, and from it alone (spec/DataLoaderCheckpoint.tla, issue 36): two runs from equal
generator states hand out the same order, a generator in another state another one, and
reseeding or advancing torch's global RNG changes none. Torch's own permutation for a seed is a
drop-in's SHOULD (test_drop_in_batching.py); this is what any loader must do with the user's
generator."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import pytest
import torch
from loaderspec.conformance.harness import Grade, checks, play, spec_property
from loaderspec.conformance.harness.batching import Config, items
from loaderspec.faultinject.events import Stop

from loaderspec.vocabulary import PropertyName

ORDER = PropertyName.ORDER_FROM_USER_GENERATOR
WHOLE = PropertyName.EXACTLY_ONCE

# Each epoch's batches, each a tuple of its items.
Epochs = list[list[tuple[int, ...]]]


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _play(
    loader_cls: type,
    grade: Grade,
    cfg: Config,
    generator: torch.Generator,
    global_rng: Callable[[], object],
) -> Epochs | None:
    """Play `cfg` with `generator` as the loader's, torch's global RNG set by `global_rng()` (the
    sandbox child is forked: it inherits it): each epoch's batches, each a permutation of the
    dataset in all; None when an epoch did not end whole (ExactlyOnce graded)."""
    plan = cfg.plan()
    plan = dataclasses.replace(plan, kwargs={**plan.kwargs, "generator": generator})
    with torch.random.fork_rng():
        global_rng()
        r = play(loader_cls, plan)
    if not all(r.of(e, Stop) for e in range(cfg.epochs)):
        grade.fail(WHOLE, f"{cfg.epochs} whole epochs ({cfg})", f"{r.last(0)}")
        return None
    # a batch's items (a described batch's leaves but its dtype)
    epochs = [
        [tuple(int(x) for x in items([b]) if x.isdigit()) for b in r.batches(e)]
        for e in range(cfg.epochs)
    ]
    for e, batches in enumerate(epochs):
        if sorted(x for b in batches for x in b) != list(range(cfg.n)):
            grade.fail(WHOLE, f"epoch {e}: a permutation of range({cfg.n})", f"{batches}")
    checks.nothing_left(grade, r)
    return epochs


def _grade(grade: Grade, same: tuple[Epochs, Epochs], other: Epochs, how: str) -> None:
    """FAIL OrderFromUserGenerator unless the two runs of `same` agree and `other` differs."""
    if same[0] != same[1]:
        grade.fail(
            ORDER,
            f"the same batches from equal generator states ({how})",
            f"{same[0]} and {same[1]}: the order follows torch's global RNG, not the generator",
        )
    elif same[0] == other:
        grade.fail(
            ORDER,
            "other batches from a generator seeded 6 than from one seeded 5",
            f"the same {other} from both: the order is not drawn from the generator",
        )


@spec_property(ORDER, WHOLE)
@pytest.mark.parametrize("workers", [pytest.param(0, marks=pytest.mark.quick), 2])
def test_the_users_generator_alone_decides_the_shuffle(
    loader_cls: type, grade: Grade, workers: int
) -> None:
    """shuffle=True, 2 epochs, played three times: generator seeded 5 with torch's global RNG
    seeded 1, the same with it seeded 2, and generator seeded 6: the first two hand out the
    same order (a reseeded global RNG changes nothing), the third another; each epoch a
    permutation. With 0 workers and with 2 (torch draws their base_seed from the generator too).

    Property: OrderFromUserGenerator. Seed (spec/DataLoaderCheckpoint.tla): each epoch's order
    is drawn from the generator the loader was given, and from it alone; (DataLoader docs)
    "generator (torch.Generator, optional): If not None, this RNG will be used by RandomSampler
    to generate random indexes".
    Guards: J1 pytorch/pytorch#5059 (randomness that is not the user's to control).
    """
    cfg = Config(n=16, batch_size=4, sampling="shuffle_seeded", workers=workers, epochs=2)
    runs = [
        _play(loader_cls, grade, cfg, _seeded(seed), functools.partial(torch.manual_seed, s))
        for seed, s in ((5, 1), (5, 2), (6, 1))
    ]
    done = [r for r in runs if r is not None]
    if len(done) == len(runs):
        how = "torch.manual_seed(1), then torch.manual_seed(2)"
        _grade(grade, (done[0], done[1]), done[2], how)


def _advanced(seed: int) -> torch.Generator:
    """A generator that drew from another seed, then was set to `seed`'s state: equal to
    `_seeded(seed)` by its state, not by how it got there."""
    g = torch.Generator().manual_seed(seed + 1000)
    torch.randperm(100, generator=g)
    return g.set_state(_seeded(seed).get_state())


def _seeded_then_drawn() -> None:
    torch.manual_seed(1)
    torch.rand(1000)  # the user's code draws from the global RNG before iter()


@spec_property(ORDER, WHOLE)
def test_equal_generator_states_give_equal_batches_in_any_order(
    loader_cls: type, grade: Grade
) -> None:
    """shuffle=True, in_order=False, 2 persistent workers, prefetch 2, 3 epochs, played three
    times: generator seeded 5 with torch's global RNG seeded 1; a generator set to the same
    state after drawing from another seed, with the global RNG seeded 1 and then drawn from; a
    generator seeded 6: the first two hand out the same batches in each epoch (in any order),
    the third other ones.

    Property: OrderFromUserGenerator. Seed (spec/DataLoaderCheckpoint.tla): the order is a
    function of the state of the generator the loader was given: equal states give equal
    orders, and torch's global RNG, reseeded or advanced, changes none.
    Guards: J1 pytorch/pytorch#5059 (randomness that is not the user's to control).
    """
    cfg = Config(
        n=12,
        batch_size=3,
        sampling="shuffle_seeded",
        workers=2,
        prefetch=2,
        persistent=True,
        in_order=False,
        epochs=3,
    )
    seeded_1 = functools.partial(torch.manual_seed, 1)
    runs = [
        _play(loader_cls, grade, cfg, generator, global_rng)
        for generator, global_rng in (
            (_seeded(5), seeded_1),
            (_advanced(5), _seeded_then_drawn),
            (_seeded(6), seeded_1),
        )
    ]
    # in_order=False: an epoch's batches in any order
    done = [[sorted(epoch) for epoch in r] for r in runs if r is not None]
    if len(done) == len(runs):
        _grade(grade, (done[0], done[1]), done[2], "torch's global RNG seeded 1, then drawn from")
