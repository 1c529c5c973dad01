"""Checkpoint and resume on the reference loader (docs/checkpoint.md; the spec's decision is
spec/DataLoaderCheckpoint.tla).

Hypothesis draws runs (map-style, IterableDataset with and without torchdata's Stateful
protocol; 0-3 workers, prefetch 1-4, persistent or not, in_order both ways, shuffle with a
seeded generator, 1-3 checkpoints each followed by a few more batches and a crash-and-resume,
and a fault: a worker SIGKILLed, or the loader's process failing, once). The user's stream
(what was handed out before each checkpoint, then what the resumed loader hands out) must equal
an uninterrupted run's: the same sequence with in_order=True, the same multiset per epoch
otherwise. Every multi-process iterator of the first ``TRACED`` runs is traced, and trace-check
must accept every trace. The test command draws ``RUNS`` = 24 runs and traces 8 (about 30 s of
play and 20 s of TLC on an idle 2-core machine); the issue's 200, all traced:
LOADERSPEC_RESUME_RUNS=200 LOADERSPEC_RESUME_TRACED=200.

Then one test per public bug of issue 19, each failing on a loader with that bug.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from loaderspec.reference import DataLoader
from resume_datasets import Crash, Items, Shards, StatefulShards

from loaderspec import tracecheck, tracewriter

RUNS = int(os.environ.get("LOADERSPEC_RESUME_RUNS", "24"))
TRACED = int(os.environ.get("LOADERSPEC_RESUME_TRACED", "8"))
SEED = 1234


@dataclass
class ResumeDraw:
    """One drawn checkpoint scenario: the loader's configuration, where it checkpoints and
    crashes, and whether a fetch fails."""

    kind: str  # "map", "iterable", "stateful"
    num_workers: int
    prefetch: int | None
    persistent: bool
    in_order: bool
    shuffle: bool
    batch_size: int
    n: int
    epochs: int
    checkpoints: dict[tuple[int, int], int]  # (epoch, batches handed) -> batches more, then crash
    between: bool  # also a checkpoint between epochs (after StopIteration), then a resume
    fail_at: int | None
    flag: str | None = None
    log: list[str] = field(default_factory=list)


@st.composite
def runs(draw: st.DrawFn) -> ResumeDraw:
    kind = draw(st.sampled_from(["map", "iterable", "stateful"]))
    workers = draw(st.integers(0, 3))
    n = draw(st.integers(4, 14))
    batch = draw(st.integers(1, 3))
    epochs = draw(st.integers(1, 2))
    batches = -(-n // batch)
    points = draw(
        st.dictionaries(
            st.tuples(st.integers(0, epochs - 1), st.integers(0, batches)),
            st.integers(0, 3),
            min_size=1,
            max_size=3,
        )
    )
    return ResumeDraw(
        kind=kind,
        num_workers=workers,
        prefetch=draw(st.integers(1, 4)) if workers else None,
        persistent=draw(st.booleans()) if workers else False,
        in_order=draw(st.booleans()),
        shuffle=kind == "map" and draw(st.booleans()),
        batch_size=batch,
        n=n,
        epochs=epochs,
        checkpoints=points,
        between=draw(st.booleans()),
        fail_at=draw(st.none() | st.integers(0, n - 1)),
    )


def make_loader(run: ResumeDraw, *, faults: bool) -> DataLoader:
    fail_at, flag = (run.fail_at, run.flag) if faults else (None, None)
    cls = {"map": Items, "iterable": Shards, "stateful": StatefulShards}[run.kind]
    dataset = cls(run.n, fail_at, flag)
    return DataLoader(
        dataset,
        batch_size=run.batch_size,
        shuffle=run.shuffle if run.kind == "map" else None,
        generator=torch.Generator().manual_seed(SEED),
        num_workers=run.num_workers,
        prefetch_factor=run.prefetch,
        persistent_workers=run.persistent,
        in_order=run.in_order,
    )


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """A state as a new process gets it back: torch.save -> torch.load(weights_only=True),
    then pickle."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return pickle.loads(pickle.dumps(torch.load(buf, weights_only=True)))


def uninterrupted(run: ResumeDraw) -> list[list[list[int]]]:
    loader = make_loader(run, faults=False)
    return [[b.tolist() for b in loader] for _ in range(run.epochs)]


def interrupted(run: ResumeDraw) -> list[list[list[int]]]:
    """The user's stream: a checkpoint at each drawn point, a few more batches, then a crash
    (the loader is dropped, a new one loads the checkpoint, what came after it is forgotten);
    a fault also crashes back to the last checkpoint."""
    loader = make_loader(run, faults=True)
    handed: list[list[list[int]]] = [[] for _ in range(run.epochs)]
    saved: tuple[int, dict[str, Any], list[list[list[int]]]] | None = None
    points = dict(run.checkpoints)
    between = run.between
    epoch, crashes = 0, 0

    def crash() -> None:
        nonlocal loader, handed, epoch, crashes
        crashes += 1
        assert crashes < 12, f"{run}: resumes do not advance"
        loader = make_loader(run, faults=True)
        if saved is None:
            handed, epoch = [[] for _ in range(run.epochs)], 0
            return
        epoch, state, mine = saved
        handed = copy.deepcopy(mine)
        loader.load_state_dict(roundtrip(state))

    while epoch < run.epochs:
        it = iter(loader)
        crashed = False
        more = None  # batches left before the crash that follows a checkpoint
        while True:
            point = (epoch, len(handed[epoch]))
            if more is None and point in points:
                more = points.pop(point)
                saved = (epoch, loader.state_dict(), copy.deepcopy(handed))
                run.log.append(f"checkpoint {point}, {more} more")
            if more == 0:
                crashed = True
                break
            try:
                batch = next(it)
            except StopIteration:
                break
            except (RuntimeError, Crash) as exc:  # a worker's death, or the process's fault
                run.log.append(f"fault at {point}: {type(exc).__name__}")
                crashed = True
                break
            handed[epoch].append(batch.tolist())
            if more is not None:
                more -= 1
        del it
        if crashed:
            crash()
            continue
        epoch += 1
        if between and epoch < run.epochs:  # a checkpoint between epochs, resumed at once
            between = False
            saved = (epoch, loader.state_dict(), copy.deepcopy(handed))
            run.log.append(f"checkpoint between epochs before {epoch}")
            crash()
    return handed


def same_stream(run: ResumeDraw, got: list[list[list[int]]], want: list[list[list[int]]]) -> None:
    for epoch, (g, w) in enumerate(zip(got, want, strict=True)):
        if run.in_order or run.num_workers <= 1:
            assert g == w, f"epoch {epoch}: {g} != {w}\n{run}"
        else:
            assert sorted(g) == sorted(w), f"epoch {epoch}: {g} is not {w} reordered\n{run}"


def test_drawn_resumes_hand_out_the_uninterrupted_stream_and_their_traces_are_accepted(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("resume")
    played: list[ResumeDraw] = []

    @settings(
        max_examples=RUNS,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(run=runs())
    def play(run: ResumeDraw) -> None:
        k = len(played)
        played.append(run)
        run.flag = str(root / f"fault{k}")
        want = uninterrupted(run)
        if k < TRACED:
            with tracewriter.trace_to(root / f"run{k:03d}"):
                got = interrupted(run)
        else:
            got = interrupted(run)
        same_stream(run, got, want)

    started = time.monotonic()
    play()
    ran = time.monotonic() - started
    # (a run without workers traces nothing: its files are empty)
    dirs = [d for d in sorted(root.glob("run*")) if any(f.stat().st_size for f in d.iterdir())]
    traces = tracecheck.runs_of(dirs)
    started = time.monotonic()
    verdicts = tracecheck.check_runs(traces)
    checked = time.monotonic() - started
    faults = sum(any("fault" in line for line in r.log) for r in played)
    print(
        f"\n{len(played)} drawn runs ({faults} with a fault) in {ran:.1f} s;"
        f" {len(traces)} traces checked in {checked:.1f} s"
    )
    rejected = [v for v in verdicts if not v.ok]
    shown = [tracecheck.localise(v).explain() for v in rejected[:2]]
    assert not rejected, f"{len(rejected)} of {len(traces)} traces rejected:\n" + "\n".join(shown)


# --- one test per public bug of issue 19: each check passes on the reference and fails on a
# --- loader with that bug (a subclass that has it) ---------------------------------------------


def flat(batches: Any) -> list[int]:
    return [x for b in batches for x in b.tolist()]


def items_loader(cls: type = DataLoader, n: int = 12, **kw: Any) -> DataLoader:
    kw.setdefault("batch_size", 2)
    return cls(Items(n), **kw)


def shards_loader(cls: type = DataLoader, n: int = 12, **kw: Any) -> DataLoader:
    kw.setdefault("batch_size", 2)
    return cls(Shards(n), **kw)


def same(a: Any, b: Any) -> bool:
    """Equal states (their tensors compared by value)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def take(it: Any, k: int) -> list[int]:
    return flat(next(it) for _ in range(k))


class FrozenAfterResume(DataLoader):
    """huggingface/datasets#8308 = pytorch/torchtitan#3907, KempnerForge#57: after a load,
    state_dict() keeps returning the loaded state."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._frozen = copy.deepcopy(state_dict)

    def state_dict(self) -> dict[str, Any]:
        frozen = getattr(self, "_frozen", None)
        return copy.deepcopy(frozen) if frozen is not None else super().state_dict()


def check_two_resumes_in_one_epoch(cls: type) -> None:
    want = flat(items_loader())
    first = items_loader(cls)
    it = iter(first)
    got = take(it, 1)
    state = first.state_dict()
    second = items_loader(cls)
    second.load_state_dict(roundtrip(state))
    it = iter(second)
    got += take(it, 2)
    state = second.state_dict()  # later than the one loaded
    third = items_loader(cls)
    third.load_state_dict(roundtrip(state))
    got += flat(third)
    assert got == want


class EndOfEpochJustFinishing(DataLoader):
    """meta-pytorch/data#1437: a state taken after StopIteration says "this epoch, all handed
    out", so the resumed iter() yields nothing: an epoch is lost."""

    def state_dict(self) -> dict[str, Any]:
        progress = self._progress
        if progress is None or not progress.ended:
            return super().state_dict()
        state = super().state_dict()
        state["epoch"] -= 1
        state["handed_below"] = len(self)
        return state


def check_end_of_epoch_checkpoint_starts_the_next_epoch_whole(cls: type) -> None:
    loader = items_loader(cls, shuffle=True, generator=torch.Generator().manual_seed(3))
    flat(loader)
    state = loader.state_dict()
    want = flat(loader)  # the uninterrupted next epoch
    resumed = items_loader(cls, shuffle=True, generator=torch.Generator().manual_seed(3))
    resumed.load_state_dict(roundtrip(state))
    assert flat(resumed) == want


class LoadIgnoredAfterUse(DataLoader):
    """meta-pytorch/data PR #1548, PrimeIntellect-ai/prime-rl PR #3332, alibaba/TorchEasyRec PR
    #544: a load after iter() or state_dict() on the same loader is ignored."""

    def state_dict(self) -> dict[str, Any]:
        self._used = True
        return super().state_dict()

    def __iter__(self) -> Any:
        self._used = True
        return super().__iter__()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not getattr(self, "_used", False):
            super().load_state_dict(state_dict)


def check_load_after_iter_and_state_dict_governs(cls: type) -> None:
    source = items_loader(num_workers=2, persistent_workers=True)
    it = iter(source)
    head = take(it, 3)
    state = source.state_dict()
    want = head + flat(it)
    loader = items_loader(cls, num_workers=2, persistent_workers=True)
    it = iter(loader)  # workers started, a batch prefetched and taken
    next(it)
    loader.state_dict()
    loader.load_state_dict(roundtrip(state))
    assert head + flat(loader) == want


class PersistentLeftoversEveryEpoch(DataLoader):
    """huggingface/datasets#7447: with persistent workers, every epoch after a resume starts
    from the loaded state again (yields only the leftover batches)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._sticky = copy.deepcopy(self._pending_state)

    def _begin_epoch(self) -> Any:
        sticky = getattr(self, "_sticky", None)
        if self._pending_state is None and sticky is not None:
            self._pending_state = copy.deepcopy(sticky)
        return super()._begin_epoch()


def check_every_epoch_after_a_resume_is_whole(cls: type) -> None:
    source = items_loader(num_workers=2, persistent_workers=True)
    it = iter(source)
    head = take(it, 2)
    state = source.state_dict()
    rest = flat(it)
    loader = items_loader(cls, num_workers=2, persistent_workers=True)
    loader.load_state_dict(roundtrip(state))
    assert flat(loader) == rest
    assert flat(loader) == head + rest  # the next epoch, whole
    assert flat(loader) == head + rest


class AliasedSnapshot(DataLoader):
    """meta-pytorch/data PR #1547: the returned state is the live one, changed by later calls."""

    _live: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        if self._live is None:
            self._live = {}
        self._live.update(super().state_dict())
        return self._live


def check_a_returned_state_never_changes(cls: type) -> None:
    loader = items_loader(cls, num_workers=2)
    it = iter(loader)
    take(it, 1)
    state = loader.state_dict()
    kept = copy.deepcopy(state)
    take(it, 2)
    loader.state_dict()
    assert same(state, kept)
    resumed = items_loader()
    resumed.load_state_dict(roundtrip(state))
    assert flat(resumed) == flat(items_loader())[2:]


class EmptyBeforeIter(DataLoader):
    """meta-pytorch/data PR #1260: state_dict() before iter() returned {}."""

    def state_dict(self) -> dict[str, Any]:
        if self._progress is None and self._pending_state is None:
            return {}
        return super().state_dict()


class PartialWorkerState(DataLoader):
    """meta-pytorch/data PR #1251: a state asked fewer than num_workers steps after a resume
    holds only the workers that produced since."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        progress = self._progress
        if progress is not None and progress.resumed and progress.core is not None:
            counts = progress.core.handed_per_worker
            for w, worker in enumerate(state["workers"]):
                if not counts[(w - progress.rotation) % len(counts)]:
                    worker["batches"] = 0  # only what this iterator's workers produced
        return state


def check_state_right_after_resume_and_before_iter(cls: type) -> None:
    want = flat(shards_loader(num_workers=3))
    fresh = shards_loader(cls, num_workers=3)
    before = roundtrip(fresh.state_dict())  # before any iter()
    source = shards_loader(cls, num_workers=3)
    source.load_state_dict(before)
    it = iter(source)
    head = take(it, 4)
    state = source.state_dict()
    resumed = shards_loader(cls, num_workers=3)
    resumed.load_state_dict(roundtrip(state))
    it = iter(resumed)
    head += take(it, 1)  # fewer than num_workers steps after the resume
    state = resumed.state_dict()
    last = shards_loader(cls, num_workers=3)
    last.load_state_dict(roundtrip(state))
    assert head + flat(last) == want


class CountsDispatched(DataLoader):
    """Maintainer on meta-pytorch/data#1520: the state is what was dispatched (prefetched
    batches are thrown away at resume)."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        progress = self._progress
        if progress is not None and progress.core is not None and not progress.ended:
            state["handed_below"] = progress.core.send_idx
            state["handed_above"] = []
        return state


def check_prefetched_batches_are_produced_again(cls: type) -> None:
    want = flat(items_loader(n=20))
    loader = items_loader(cls, n=20, num_workers=2, prefetch_factor=4)
    it = iter(loader)
    head = take(it, 3)  # 8 tasks were sent ahead
    state = loader.state_dict()
    resumed = items_loader(cls, n=20, num_workers=2, prefetch_factor=4)
    resumed.load_state_dict(roundtrip(state))
    assert head + flat(resumed) == want


class UnorderedCount(DataLoader):
    """StatefulDataLoader's docs: in_order=False "has no guarantees for state management": a
    count of batches handed out, not which ones."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["handed_below"] += len(state["handed_above"])
        state["handed_above"] = []
        return state


class SlowFirst(Items):
    """Item 0 arrives last among the first few: in_order=False hands others out first."""

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 0:
            time.sleep(0.3)
        return super().__getitem__(i)


def check_unordered_resume_is_exact(cls: type) -> None:
    kw = {"batch_size": 1, "num_workers": 2, "in_order": False, "prefetch_factor": 2}
    loader = cls(SlowFirst(10), **kw)
    it = iter(loader)
    head = take(it, 2)
    assert 0 not in head, "item 0 came first: the check needs it late"
    state = loader.state_dict()
    resumed = cls(Items(10), **kw)
    resumed.load_state_dict(roundtrip(state))
    assert sorted(head + flat(resumed)) == list(range(10))


class TopologyUnchecked(DataLoader):
    """A different num_workers refused by a bare assert, which python -O removes: the state is
    taken as it comes."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending_state = copy.deepcopy(state_dict)


def check_another_num_workers(cls: type) -> None:
    source = items_loader(num_workers=2)
    it = iter(source)
    head = take(it, 2)
    state = source.state_dict()
    resumed = items_loader(cls, num_workers=3)
    resumed.load_state_dict(roundtrip(state))  # map-style: continues exactly
    assert head + flat(resumed) == flat(items_loader())
    source = shards_loader(num_workers=2)
    it = iter(source)
    take(it, 2)
    state = source.state_dict()
    with pytest.raises(ValueError, match=r"num_workers=2.*num_workers=3"):
        shards_loader(cls, num_workers=3).load_state_dict(roundtrip(state))


class OrderNotRestored(DataLoader):
    """huggingface/accelerate PR #4203, #4232, meta-pytorch/data PR #1515: the shuffle's
    generator state is not restored: the right position in the wrong order."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = copy.deepcopy(state_dict)
        state["sampler_rng"] = None
        super().load_state_dict(state)


def check_shuffle_order_is_restored(cls: type) -> None:
    def make(c: type, seed: int) -> DataLoader:
        return items_loader(c, shuffle=True, generator=torch.Generator().manual_seed(seed))

    source = make(DataLoader, 5)
    it = iter(source)
    head = take(it, 2)
    state = source.state_dict()
    want = head + flat(it)
    resumed = make(cls, 6)  # the new process's generator is not the old one's
    resumed.load_state_dict(roundtrip(state))
    assert head + flat(resumed) == want


BUGS = [
    (check_two_resumes_in_one_epoch, FrozenAfterResume),
    (check_end_of_epoch_checkpoint_starts_the_next_epoch_whole, EndOfEpochJustFinishing),
    (check_load_after_iter_and_state_dict_governs, LoadIgnoredAfterUse),
    (check_every_epoch_after_a_resume_is_whole, PersistentLeftoversEveryEpoch),
    (check_a_returned_state_never_changes, AliasedSnapshot),
    (check_state_right_after_resume_and_before_iter, EmptyBeforeIter),
    (check_state_right_after_resume_and_before_iter, PartialWorkerState),
    (check_prefetched_batches_are_produced_again, CountsDispatched),
    (check_unordered_resume_is_exact, UnorderedCount),
    (check_another_num_workers, TopologyUnchecked),
    (check_shuffle_order_is_restored, OrderNotRestored),
]


@pytest.mark.parametrize(("check", "broken"), BUGS, ids=[b.__name__ for _, b in BUGS])
def test_public_bug_is_caught(check: Any, broken: type) -> None:
    check(DataLoader)
    with pytest.raises((AssertionError, ValueError, TypeError, KeyError, pytest.fail.Exception)):
        check(broken)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_checkpoint_before_a_later_epochs_first_batch_resumes_that_epochs_order(
    num_workers: int,
) -> None:
    """Found by the drawn resumes (2026-11-28): one process draws the sampler's order at the
    first ``next()``, so a state taken between ``iter()`` and it recorded no generator state,
    and in epoch 1 the resumed loader replayed epoch 0's order."""

    def make(seed: int) -> DataLoader:
        generator = torch.Generator().manual_seed(seed)
        return items_loader(shuffle=True, generator=generator, num_workers=num_workers)

    source = make(5)
    first = flat(source)
    it = iter(source)
    state = source.state_dict()
    want = flat(it)
    assert sorted(want) == sorted(first)
    assert want != first  # epoch 1 comes in another order than epoch 0
    resumed = make(6)  # the new process's generator is not the old one's
    resumed.load_state_dict(roundtrip(state))
    assert flat(resumed) == want


def test_state_is_plain_data_and_does_not_grow_with_the_dataset() -> None:
    sizes = []
    for n in (100, 100_000):
        loader = items_loader(n=n, shuffle=True, generator=torch.Generator().manual_seed(1))
        it = iter(loader)
        take(it, 3)
        buf = io.BytesIO()
        torch.save(loader.state_dict(), buf)
        sizes.append(len(buf.getvalue()))
        del it
    assert sizes[0] == sizes[1], sizes


def test_bad_states_get_one_clear_error() -> None:
    loader = items_loader()
    with pytest.raises(TypeError, match="expects the dict state_dict"):
        loader.load_state_dict([1, 2])  # type: ignore[arg-type]  # a list, on purpose: the error under test
    with pytest.raises(ValueError, match="lacks"):
        loader.load_state_dict({"epoch": 1})
    with pytest.raises(ValueError, match=r"iterable-style dataset's.*map-style"):
        loader.load_state_dict(shards_loader().state_dict())
    with pytest.raises(ValueError, match="snapshot_every_n_steps"):
        items_loader(snapshot_every_n_steps=0)
    items_loader(snapshot_every_n_steps=None)  # accepted for compatibility
