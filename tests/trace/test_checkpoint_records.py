"""The user's checkpoints are trace records, and trace-check holds them to the spec (issue 19;
docs/checkpoint.md, "Traced"): ``UserStateDict`` of a live iterator must count exactly the
batches its run handed out (CheckpointIsHandedOut), and ``UserLoadStateDict``, written before
the iterator it governs, must be the state that iterator began from (LoadIsNeverIgnored).
Since issue 35 the user's parts too, as fingerprints: each worker's user state is the one its
last batch handed out brought (UserIsBrought), an epoch's generator state is one (RngIsDrawn),
and a load's user parts are what the iterator's workers start from.

One correct resumed run of each dataset kind is traced (a checkpoint with batches prefetched and
not handed out, a crash, a new loader's ``state_dict()`` before and after its load, one in the
middle of the resumed epoch and one after StopIteration, then two more epochs on persistent
workers; map-style shuffled over a Stateful dataset), as are a shuffled loader's two epochs on
persistent workers (one run); all are accepted, and each rule then rejects a copy of one broken
the way a public bug breaks it, at the record that shows it. One ``check_runs`` call.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest
import torch
from loaderspec.reference import DataLoader
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from loaderspec import tracecheck, tracewriter
from loaderspec.traces import IteratorTrace, Record, split_runs

N, BATCH = 10, 2  # 5 batches an epoch


class Reads(Dataset):
    """Item i is i; each worker's copy counts the items it read and saves that count (the
    Stateful protocol): a user state that changes with every batch."""

    def __init__(self) -> None:
        self.reads = 0

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        self.reads += 1
        return i

    def state_dict(self) -> dict[str, int]:
        return {"reads": self.reads}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.reads = state["reads"]


class Shards(IterableDataset):
    """Worker w of W yields w, w + W, ... below N: a shard per worker, fast-forwarded at a
    resume (no Stateful protocol)."""

    def __iter__(self) -> Any:
        info = get_worker_info()
        w, num = (info.id, info.num_workers) if info is not None else (0, 1)
        return iter(range(w, N, num))


def _resumed_runs(kind: str, directory: Path) -> tuple[IteratorTrace, ...]:
    """Two batches handed out (more prefetched), a checkpoint, one more batch, a crash; a new
    loader loads the checkpoint, runs to the end, and (persistent workers) one batch into the
    next epoch. Map-style: a shuffled order from a seeded generator and a Stateful dataset.
    Returns the resumed iterator's run."""

    def loader() -> DataLoader:
        if kind == "map":  # the usual restart: seed, rebuild, load
            gen = torch.Generator().manual_seed(0)
            return DataLoader(
                Reads(),
                batch_size=BATCH,
                num_workers=2,
                prefetch_factor=2,
                shuffle=True,
                generator=gen,
                persistent_workers=True,
            )
        return DataLoader(
            Shards(), batch_size=BATCH, num_workers=2, prefetch_factor=2, persistent_workers=True
        )

    with tracewriter.trace_to(directory):
        first = loader()
        it = iter(first)
        next(it), next(it)
        state = first.state_dict()
        next(it)
        del it, first
        gc.collect()
        second = loader()
        second.state_dict()  # before the load: a new loader's epoch 0, whole
        second.load_state_dict(state)
        second.state_dict()  # before iter(): the loaded state
        it = iter(second)
        next(it)
        second.state_dict()  # three batches of the epoch handed out
        assert list(it)  # the rest of the epoch
        second.state_dict()  # after StopIteration: the next epoch, whole
        for _ in range(2):  # a new iterator (the resumed one served its epoch only), whose
            it = iter(second)  # next epoch runs on the same workers
            next(it)
            second.state_dict()  # one batch into the epoch
            assert list(it)
            second.state_dict()  # after StopIteration
        del it, second
        gc.collect()
    runs = tracecheck.runs_of([directory])
    # The resumed iterator's run; where it loaded user states (map-style: Reads), each later
    # epoch is a new iterator's run that begins from them (arranged).
    assert len(runs) == (4 if kind == "map" else 2)
    return tuple(runs[1:])


def _shuffled_run(directory: Path) -> IteratorTrace:
    """A shuffled map-style loader with persistent workers and nothing of the user's to save:
    its epochs are one iterator's run. A state in epoch 0, one after its StopIteration (it
    names the generator state epoch 1's order is drawn from), one in epoch 1."""
    gen = torch.Generator().manual_seed(0)
    loader = DataLoader(
        list(range(N)),
        batch_size=BATCH,
        num_workers=2,
        prefetch_factor=2,
        shuffle=True,
        generator=gen,
        persistent_workers=True,
    )
    with tracewriter.trace_to(directory):
        for _ in range(2):
            it = iter(loader)
            next(it)
            loader.state_dict()  # one batch into the epoch
            assert list(it)
            loader.state_dict()  # after StopIteration: the next epoch, whole
        del it, loader
        gc.collect()
    (run,) = tracecheck.runs_of([directory])
    return run


def _at(run: IteratorTrace, action: str, nth: int) -> int:
    return [i for i, r in enumerate(run.records) if r.action == action][nth]


def _with_checkpoint(run: IteratorTrace, i: int, name: str, **change: Any) -> IteratorTrace:
    records = list(run.records)
    record = records[i]
    checkpoint = {**record.extra["checkpoint"], **change}
    records[i] = dataclasses.replace(record, extra={**record.extra, "checkpoint": checkpoint})
    return dataclasses.replace(run, name=name, records=tuple(records))


def _broken(resumed: dict[str, IteratorTrace]) -> dict[str, tuple[IteratorTrace, str, int]]:
    """name -> (a broken copy of a correct run, the action and index of the record that shows
    it). Each is a public bug of issue 19, as its trace shows it."""
    m, it = resumed["map"], resumed["iterable"]
    after_load = _at(m, "UserStateDict", 1)  # before the iterator, after the load
    mid = _at(m, "UserStateDict", 2)
    end = _at(m, "UserStateDict", 3)
    fresh = {**m.config["start"], "handed_below": 0, "handed_above": []}
    mid_user = m.records[mid].extra["checkpoint"]["user"]
    dropped = {**m.config["start"], "user": ["" for _ in mid_user]}
    nxt = resumed["map-next"]
    nxt_mid = _at(nxt, "UserStateDict", 0)
    sh = resumed["shuffled"]
    sh_rng0 = sh.records[_at(sh, "UserStateDict", 0)].extra["checkpoint"]["rng"]
    out = {
        # meta-pytorch/data#1520: the state counts a prefetched batch that was not handed out.
        "counts-prefetched": (
            _with_checkpoint(m, mid, "counts-prefetched", handed_below=4),
            "UserStateDict",
            mid,
        ),
        # meta-pytorch/data#1437: after StopIteration the state says "this epoch, all handed
        # out" instead of the next epoch, whole.
        "end-of-epoch": (
            _with_checkpoint(m, end, "end-of-epoch", epoch=0, handed_below=5),
            "UserStateDict",
            end,
        ),
        # meta-pytorch/data PR #1548: the load is ignored: the iterator after it begins a whole
        # epoch (its header's start), not the loaded state.
        "load-ignored": (
            dataclasses.replace(m, name="load-ignored", config={**m.config, "start": fresh}),
            "UserLoadStateDict",
            _at(m, "UserLoadStateDict", 0),
        ),
        # huggingface/datasets#8308: state_dict() right after a load returns another state
        # than the loaded one (here the epoch's start).
        "not-the-loaded-state": (
            _with_checkpoint(m, after_load, "not-the-loaded-state", handed_below=0),
            "UserStateDict",
            after_load,
        ),
        # issue 35: a state that drops a worker's dataset state (the resumed worker would
        # start its dataset afresh), or holds an earlier one (the state it was loaded with,
        # not the one its last batch handed out brought).
        "dataset-state-dropped": (
            _with_checkpoint(m, mid, "dataset-state-dropped", user=["", *mid_user[1:]]),
            "UserStateDict",
            mid,
        ),
        "stale-dataset-state": (
            _with_checkpoint(m, mid, "stale-dataset-state", user=m.config["start"]["user"]),
            "UserStateDict",
            mid,
        ),
        # issue 35: a load whose dataset part is ignored: the iterator after it starts its
        # workers' datasets afresh (its header's start holds no user state).
        "load-dataset-ignored": (
            dataclasses.replace(
                m, name="load-dataset-ignored", config={**m.config, "start": dropped}
            ),
            "UserLoadStateDict",
            _at(m, "UserLoadStateDict", 0),
        ),
        # issue 35 (shuffle=True, a state at an epoch's end): the next epoch's state names the
        # generator state the epoch before drew its order from, a stale one: a resume from it
        # draws that epoch's order again.
        "stale-rng": (
            _with_checkpoint(nxt, nxt_mid, "stale-rng", rng=m.config["start"]["rng"]),
            "UserStateDict",
            nxt_mid,
        ),
        # issue 35 (shuffle=True): a state taken after StopIteration names the generator
        # state the ended epoch drew its order from, not the one the next epoch's is drawn
        # from: a resume from it repeats that order. The next epoch's state shows it.
        "stale-rng-at-the-end": (
            _with_checkpoint(sh, _at(sh, "UserStateDict", 1), "stale-rng-at-the-end", rng=sh_rng0),
            "UserStateDict",
            _at(sh, "UserStateDict", 2),
        ),
        # meta-pytorch/data PR #1251: a shard's batches handed out are not counted.
        "shard-uncounted": (
            _with_checkpoint(it, _at(it, "UserStateDict", 2), "shard-uncounted", batches=[1, 1]),
            "UserStateDict",
            _at(it, "UserStateDict", 2),
        ),
    }
    return out


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root = tmp_path_factory.mktemp("checkpoint-records")
    resumed_map, map_next, _ = _resumed_runs("map", root / "map")
    (resumed_iterable,) = _resumed_runs("iterable", root / "iterable")
    resumed = {
        "map": resumed_map,
        "map-next": map_next,
        "iterable": resumed_iterable,
        "shuffled": _shuffled_run(root / "shuffled"),
    }
    broken = _broken(resumed)
    runs = [*resumed.values(), *(b[0] for b in broken.values())]
    verdicts = tracecheck.check_runs(runs, localise=False)
    names = [*resumed, *broken]
    return broken, dict(zip(names, verdicts, strict=True))


@pytest.mark.slow
def test_a_resumed_run_with_its_checkpoints_is_accepted(checked):
    for kind in ("map", "map-next", "iterable", "shuffled"):
        verdict = checked[1][kind]
        assert verdict.ok, verdict.explain()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "counts-prefetched",
        "end-of-epoch",
        "load-ignored",
        "not-the-loaded-state",
        "shard-uncounted",
        "dataset-state-dropped",
        "stale-dataset-state",
        "load-dataset-ignored",
        "stale-rng",
        "stale-rng-at-the-end",
    ],
)
def test_a_broken_checkpoint_is_rejected_at_its_record(checked, name):
    broken, verdicts = checked
    _, action, index = broken[name]
    verdict = verdicts[name]
    assert verdict.status == tracecheck.NOT_A_BEHAVIOUR, verdict.explain()
    assert verdict.record is not None, verdict.explain()
    assert verdict.record.action == action, verdict.explain()
    assert verdict.line == index + 1, verdict.explain()


def _record(t: int, action: str, **fields: Any) -> Record:
    actor = "Main" if action == "Config" else "User"
    return Record(t=t, pid=1, actor=actor, action=action, **fields)


def test_a_users_record_before_its_iterator_opens_the_run_it_governs():
    header = _record(0, "Config", extra={"config": {"num_workers": 1}})
    load = _record(1, "UserLoadStateDict", extra={"checkpoint": {}})
    inside = _record(3, "UserStateDict", epoch=0, state={}, extra={"checkpoint": {}})
    after = _record(5, "UserStateDict", extra={"checkpoint": {}})  # no iterator follows
    records = [load, dataclasses.replace(header, t=2), inside, dataclasses.replace(load, t=4)]
    runs = split_runs([*records, dataclasses.replace(header, t=4), after], "log")
    assert [[r.t for r in run.records] for run in runs] == [[1, 3], [4]]
