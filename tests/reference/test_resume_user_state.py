"""Resume with the user's own state (issue 35): datasets, iterators and samplers with torchdata's
``Stateful`` protocol, shuffles drawing from torch's RNG, worker seeds, foreign states, and the
state as plain data (docs/checkpoint.md).

Every check grades a resumed run against the uninterrupted one, item for item and value for
value: the uninterrupted loader and the restarted one are each built the usual way (seed torch,
build the loader; the restarted one then loads the state, round-tripped as a new process gets
it). Each failed on the reference before issue 35's fix.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
from loaderspec.reference import DataLoader
from loaderspec.reference.checkpoint import is_stateful
from resume_datasets import (
    EpochCounting,
    EpochSampler,
    Items,
    Noisy,
    SeedTagged,
    SelfIterating,
    Shards,
    StatefulShards,
    Walks,
    WorkerDraws,
)

Make = Callable[[], DataLoader]


def torch_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded: dict[str, Any] = torch.load(buf, weights_only=True)
    return loaded


def json_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(state))
    return loaded


def pickle_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = pickle.loads(pickle.dumps(state))
    return loaded


ROUNDTRIPS = [json_roundtrip, pickle_roundtrip, torch_roundtrip]


def epoch_of(loader: Any) -> list[list[Any]]:
    return [b.tolist() for b in loader]


def loader_of(dataset: Any, seed: int = 0, **kw: Any) -> Make:
    """The usual (re)start: torch seeded, then the loader built (``generator_seed``: with a
    generator of its own, seeded)."""

    def make() -> DataLoader:
        torch.manual_seed(seed)
        options = {"batch_size": 2, **kw}
        if "generator_seed" in options:  # a generator of its own, seeded
            options["generator"] = torch.Generator().manual_seed(options.pop("generator_seed"))
        return DataLoader(dataset(), **options)

    return make


def resumed(
    make: Make,
    *,
    epoch: int,
    at: int | None,
    epochs: int = 2,
    roundtrip: Callable[[dict[str, Any]], dict[str, Any]] = json_roundtrip,
) -> tuple[list[list[Any]], list[list[Any]]]:
    """(got, want): ``epochs`` epochs with a checkpoint in ``epoch`` after ``at`` batches (the
    iterator made first: ``at=0`` is right after ``iter()``), or after its StopIteration
    (``at=None``), resumed by a new loader; and the uninterrupted run."""
    loader = make()
    want = [epoch_of(loader) for _ in range(epochs)]
    del loader
    source = make()
    got = [epoch_of(source) for _ in range(epoch)]
    if at is None:
        got.append(epoch_of(source))
        state = source.state_dict()
        head: list[Any] | None = None
    else:
        it = iter(source)
        head = [next(it).tolist() for _ in range(at)]
        state = source.state_dict()
        del it
    del source
    loader = make()
    loader.load_state_dict(roundtrip(state))
    if head is not None:
        got.append(head + epoch_of(loader))
    while len(got) < epochs:
        got.append(epoch_of(loader))
    return got, want


WORKERS = [
    pytest.param({}, id="inline"),
    pytest.param({"num_workers": 2}, id="workers"),
    pytest.param({"num_workers": 2, "persistent_workers": True}, id="persistent"),
]
# What the test command leaves to the nightly tier (each behaviour keeps a case with workers).
NIGHTLY = pytest.mark.nightly


# 1. A dataset that is its own iterator: its state is restored after iter() (which rewinds it).
@pytest.mark.parametrize("kw", WORKERS)
@pytest.mark.parametrize("at", [pytest.param(1, marks=NIGHTLY), 3])
def test_a_self_iterating_dataset_resumes_where_it_was(kw: dict[str, Any], at: int) -> None:
    got, want = resumed(loader_of(lambda: SelfIterating(12), **kw), epoch=0, at=at)
    assert got == want


# 2. A state right after iter(), before the epoch's first batch, holds the dataset's state.
@pytest.mark.parametrize("kw", WORKERS)
def test_a_state_after_iter_before_the_first_batch_resumes_the_whole_epoch(
    kw: dict[str, Any],
) -> None:
    got, want = resumed(loader_of(lambda: SelfIterating(12), **kw), epoch=1, at=0)
    assert got == want
    assert len(got[1]) == 6


# 3. A state after StopIteration keeps what the dataset did at the end (its epoch counter).
@pytest.mark.parametrize("dataset", [SelfIterating, EpochCounting])
@pytest.mark.parametrize("kw", WORKERS)
def test_a_state_after_stop_iteration_keeps_the_datasets_own_state(
    kw: dict[str, Any], dataset: type
) -> None:
    got, want = resumed(loader_of(lambda: dataset(12), **kw), epoch=0, at=None, epochs=3)
    assert got == want


# 4. The iterator iter(dataset) returns, with its own state_dict(): its items depend on it.
@pytest.mark.parametrize("kw", WORKERS)
def test_an_iterator_with_its_own_state_resumes_value_for_value(kw: dict[str, Any]) -> None:
    # (epoch 1: its iterators' seeds are not the restarted process's first draws)
    got, want = resumed(loader_of(lambda: Walks(12), **kw), epoch=1, at=2)
    assert got == want


# 5. shuffle=True without a generator: the state records torch's RNG the order comes from.
@pytest.mark.parametrize("kw", WORKERS)
@pytest.mark.parametrize("at", [None, pytest.param(0, marks=NIGHTLY), 2])
def test_a_shuffle_without_a_generator_resumes_its_epochs_order(
    kw: dict[str, Any], at: int | None
) -> None:
    got, want = resumed(loader_of(lambda: Items(12), shuffle=True, **kw), epoch=0, at=at, epochs=3)
    assert want[0] != want[1]  # the epochs' orders differ
    assert got == want


# 6. A map-style dataset's own state, and the workers' seeds: per-item values equal.
@pytest.mark.parametrize("kw", WORKERS)
@pytest.mark.parametrize("at", [pytest.param(1, marks=NIGHTLY), 2])
def test_a_map_style_datasets_own_state_is_kept(kw: dict[str, Any], at: int) -> None:
    got, want = resumed(loader_of(lambda: Noisy(12), **kw), epoch=0, at=at)
    assert got == want


@pytest.mark.parametrize("at", [1, pytest.param(2, marks=NIGHTLY)])
def test_the_worker_seeds_are_kept(at: int) -> None:
    got, want = resumed(loader_of(lambda: SeedTagged(12), num_workers=2), epoch=1, at=at)
    assert got == want


# 7. A foreign or malformed state is refused at load_state_dict(), one error naming the field.
def _state_of(make: Make, at: int = 2) -> dict[str, Any]:
    loader = make()
    it = iter(loader)
    for _ in range(at):
        next(it)
    state = json_roundtrip(loader.state_dict())
    del it
    return state


def _items(n: int = 20, **kw: Any) -> Make:
    return loader_of(lambda: Items(n), **kw)


def _malformed(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state[field] = value

    return change


FOREIGN = [
    # (a name, the state's loader, a change to its state or None, the loader that loads it,
    #  words the error must name)
    ("dataset length", _items(100), None, _items(20), ["100", "20"]),
    ("batch_size", _items(20, batch_size=2), None, _items(20, batch_size=3), ["batch_size"]),
    ("sampler", _items(20, shuffle=True), None, _items(20), ["sampler"]),
    ("dataset kind", loader_of(lambda: Shards(20)), None, _items(20), ["iterable", "map"]),
    ("string count", _items(), _malformed("handed_below", "3"), _items(), ["handed_below"]),
    ("handed_below 10**9", _items(), _malformed("handed_below", 10**9), _items(), ["handed_below"]),
    (
        "bad RNG state",
        _items(shuffle=True),
        _malformed("sampler_rng", "garbage"),
        _items(shuffle=True),
        ["sampler_rng"],
    ),
    (
        "truncated workers",
        loader_of(lambda: StatefulShards(20), num_workers=2),
        lambda s: s["workers"].pop(),
        loader_of(lambda: StatefulShards(20), num_workers=2),
        ["workers"],
    ),
]


@pytest.mark.parametrize(
    ("source", "change", "target", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in FOREIGN],
)
def test_a_foreign_or_malformed_state_is_refused_at_load(
    source: Make,
    change: Callable[[dict[str, Any]], None] | None,
    target: Make,
    words: list[str],
) -> None:
    state = _state_of(source)
    if change is not None:
        change(state)
    loader = target()
    with pytest.raises(ValueError) as raised:
        loader.load_state_dict(state)
    message = str(raised.value)
    for word in words:
        assert word in message, message


# 8. The state is plain data: JSON, pickle and torch.load(weights_only=True) resume alike.
def _no_tensor(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return False
    if isinstance(obj, dict):
        return all(_no_tensor(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return all(_no_tensor(v) for v in obj)
    return True


@pytest.mark.parametrize("roundtrip", ROUNDTRIPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_items(shuffle=True, generator_seed=1), id="map"),
        pytest.param(loader_of(lambda: StatefulShards(20)), id="iterable"),
        pytest.param(
            loader_of(lambda: StatefulShards(20), num_workers=2), id="workers", marks=NIGHTLY
        ),
    ],
)
def test_the_state_is_plain_data(
    make: Make, roundtrip: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    state = _state_of(make)
    assert _no_tensor(state), state
    json.dumps(state)
    got, want = resumed(make, epoch=0, at=2, roundtrip=roundtrip)
    assert got == want


def test_the_state_is_o_of_workers() -> None:
    sizes = [
        len(json.dumps(_state_of(_items(n, shuffle=True, num_workers=1))))
        for n in (100_000, 900_000)  # (as many digits)
    ]
    assert sizes[0] == sizes[1], sizes


# The sampler's own state (the brief's list of what is saved): its order depends on it.
@pytest.mark.parametrize("kw", WORKERS[:2])
@pytest.mark.parametrize("at", [pytest.param(None, marks=NIGHTLY), 0, 2])
def test_a_stateful_samplers_own_state_is_kept(kw: dict[str, Any], at: int | None) -> None:
    def make() -> DataLoader:
        return DataLoader(Items(12), batch_size=2, sampler=EpochSampler(12), **kw)

    got, want = resumed(make, epoch=1, at=at, epochs=3)
    assert want[0] != want[1]
    assert got == want


def test_stateful_is_torchdatas_protocol() -> None:
    """``is_stateful`` agrees with torchdata's ``Stateful`` where torchdata is installed."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader").Stateful
    for obj in (Items(3), StatefulShards(3), SelfIterating(3), Walks(3), EpochSampler(3), 3):
        assert is_stateful(obj) == isinstance(obj, stateful), obj


# The worker process's RNG, as a persistent worker begins or ends an epoch.
@pytest.mark.parametrize("kw", [WORKERS[0], WORKERS[2]])
@pytest.mark.parametrize(("epoch", "at"), [(0, None), (1, 0)])
def test_a_persistent_workers_rng_goes_on_across_a_resume(
    kw: dict[str, Any], epoch: int, at: int | None
) -> None:
    got, want = resumed(loader_of(lambda: WorkerDraws(12), **kw), epoch=epoch, at=at, epochs=3)
    assert want[0] != want[1]
    assert got == want
