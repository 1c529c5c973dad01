"""The batching contract's corners, each on its own (the drawn configurations play them too):
a custom batch_sampler's batches as given, items converted (not collated) with batch_size=None,
and a seeded generator's order (ExactlyOnce; torch's order a drop-in's SHOULD; that the order is
the user's generator's alone: test_order_from_user_generator.py)."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, checks, kwargs, play, spec_property
from loaderspec.conformance.harness.batching import Config, compare
from loaderspec.faultinject.events import Len, Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.EXACTLY_ONCE


@pytest.mark.quick
@spec_property(PROP, PropertyName.IN_ORDER_DELIVERY)
def test_custom_batch_sampler_batches_are_handed_out_as_given(
    loader_cls: type, grade: Grade
) -> None:
    """batch_sampler=[[9, 2], [0], [4, 5, 6], [1, 3, 7, 8]], 2 persistent workers, 2 epochs: each
    epoch hands out exactly those batches in that order, and len(loader) is 4.

    Property: ExactlyOnce. Seed (DataLoader docs): "batch_sampler (Sampler or Iterable,
    optional): like sampler, but returns a batch of indices at a time".
    Guards: D2 pytorch/pytorch#33413 (fewer batches than the sampler gives).
    """
    given = [[9, 2], [0], [4, 5, 6], [1, 3, 7, 8]]
    r = play(
        loader_cls,
        n=10,
        epochs=2,
        len_of_loader=True,
        kwargs=kwargs(2, 2, batch_sampler=given, persistent_workers=True),
    )
    length = r.first(Len, epoch=None)
    if length is None or length.length != len(given):
        grade.fail(
            PROP, f"len(loader) {len(given)}", f"{None if length is None else length.length}"
        )
    for epoch in range(2):
        if r.batches(epoch) != given or not r.of(epoch, Stop):
            grade.fail(PROP, f"epoch {epoch}: {given}", f"{r.batches(epoch)} then {r.last(epoch)}")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.TYPE_OK)
@pytest.mark.parametrize("data", ["map", "iterable"])
def test_unbatched_items_are_converted_not_collated(
    loader_cls: type, grade: Grade, data: str
) -> None:
    """batch_size=None with torch's default collate_fn (default_convert), 2 workers: each item
    handed out as torch converts it (a 0-d tensor stays one; no batch dimension added).

    Property: ExactlyOnce. Seed (DataLoader docs): "When automatic batching is disabled, the
    default collate_fn simply converts NumPy arrays into PyTorch Tensors, and keeps everything
    else untouched".
    Guards: D2 pytorch/pytorch#33413 (batches not the ones torch gives).
    """
    cfg = (
        Config(n=5, batch_size=None, workers=2, prefetch=1)
        if data == "map"
        else Config(shards=(3, 2), n=0, batch_size=None, workers=2)
    )
    r = play(loader_cls, cfg.plan())
    compare(grade, cfg, r)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_seeded_shuffle_gives_torchs_order(loader_cls: type, grade: Grade) -> None:
    """shuffle=True with generator=torch.Generator().manual_seed(5), 2 workers, 2 epochs, in
    order: a permutation per epoch (MUST), and torch's own order for that generator, so runs
    are reproducible (a drop-in's SHOULD: the spec gives determinism no property).

    Property: ExactlyOnce. Seed (DataLoader docs): "generator (torch.Generator, optional): If not
    None, this RNG will be used by RandomSampler to generate random indexes".
    Guards: J1 pytorch/pytorch#5059 (randomness that is not the user's to control).
    """
    cfg = Config(n=16, batch_size=4, sampling="shuffle_seeded", seed=5, workers=2, epochs=2)
    r = play(loader_cls, cfg.plan())
    compare(grade, cfg, r)
    checks.nothing_left(grade, r)
