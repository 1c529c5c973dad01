"""The resume cases' datasets and samplers with a state of their own (`faultinject.user_state`),
inline: no loader, no process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from loaderspec.faultinject import user_state
from torch.utils.data import IterableDataset


def _items(kind: user_state.UserKind) -> list[Any]:
    """Two passes over a fresh `kind` of 6 items (its sampler's order for a map-style one)."""
    torch.manual_seed(3)
    data, extra = user_state.build(kind, 6)
    if "sampler" in extra:
        return [[data[i] for i in extra["sampler"]] for _ in range(2)]
    if isinstance(data, IterableDataset):
        return [list(iter(data)) for _ in range(2)]
    return [[data[i] for i in range(6)] for _ in range(2)]


@pytest.mark.parametrize("kind", user_state.USER_KINDS)
def test_every_kind_is_reproducible_under_the_users_restart(kind: user_state.UserKind) -> None:
    """The same seed, the same two passes: what a resumed run is graded against is stable."""
    first = _items(kind)
    assert first == _items(kind)
    assert len(first[0]) == 6


def test_a_dataset_that_is_its_own_iterator_keeps_a_state_restored_after_iter() -> None:
    data, _ = user_state.build("self_iterating", 6)
    it = iter(data)
    assert [next(it), next(it)] == [0, 1]
    state = data.state_dict()
    again, _ = user_state.build("self_iterating", 6)
    resumed = iter(again)  # StatefulDataLoader's order: iter(dataset), then its state
    again.load_state_dict(state)
    assert [next(resumed) for _ in range(4)] == [2, 3, 4, 5]  # list() would iter() again
    with pytest.raises(StopIteration):
        next(resumed)
    assert again.state_dict() == {"pos": 0, "epoch": 1}  # its epoch ended


def test_an_unknown_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(ValueError, match="user state kind 'nope': pick one of self_iterating"):
        user_state.build("nope", 4)  # type: ignore[arg-type]  # a wrong kind, on purpose
