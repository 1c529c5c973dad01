"""The user's checkpoints are trace records, and trace-check holds them to the spec (issue 19;
docs/checkpoint.md, "Traced"): ``UserStateDict`` of a live iterator must count exactly the
batches its run handed out (CheckpointIsHandedOut), and ``UserLoadStateDict``, written before
the iterator it governs, must be the state that iterator began from (LoadIsNeverIgnored).

One correct resumed run of each dataset kind is traced (a checkpoint with batches prefetched and
not handed out, a crash, a new loader's ``state_dict()`` before and after its load, one in the
middle of the resumed epoch and one after StopIteration) and accepted; each rule then rejects a
copy of it broken the way a public bug breaks it, at the record that shows it. Two TLC calls.
"""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path
from typing import Any

import pytest
from loaderspec.reference import DataLoader
from torch.utils.data import IterableDataset, get_worker_info

from loaderspec import tracecheck, tracewriter
from loaderspec.traces import IteratorTrace, Record, split_runs

N, BATCH = 10, 2  # 5 batches an epoch


class Shards(IterableDataset):
    """Worker w of W yields w, w + W, ... below N: a shard per worker, fast-forwarded at a
    resume (no Stateful protocol)."""

    def __iter__(self) -> Any:
        info = get_worker_info()
        w, num = (info.id, info.num_workers) if info is not None else (0, 1)
        return iter(range(w, N, num))


def _resumed_run(kind: str, directory: Path) -> IteratorTrace:
    """Two batches handed out (more prefetched), a checkpoint, one more batch, a crash; a new
    loader loads the checkpoint and runs to the end. Returns the resumed iterator's run."""

    def loader() -> DataLoader:
        data: Any = list(range(N)) if kind == "map" else Shards()
        return DataLoader(data, batch_size=BATCH, num_workers=2, prefetch_factor=2)

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
        del it, second
        gc.collect()
    runs = tracecheck.runs_of([directory])
    assert len(runs) == 2
    return runs[1]


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
    resumed = {kind: _resumed_run(kind, root / kind) for kind in ("map", "iterable")}
    broken = _broken(resumed)
    runs = [*resumed.values(), *(b[0] for b in broken.values())]
    verdicts = tracecheck.check_runs(runs, localise=False)
    names = [*resumed, *broken]
    return broken, dict(zip(names, verdicts, strict=True))


@pytest.mark.slow
def test_a_resumed_run_with_its_checkpoints_is_accepted(checked):
    for kind in ("map", "iterable"):
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
