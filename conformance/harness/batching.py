"""The batching contract, differentially: a drawn configuration, the batches torch's own
single-process path gives for it, and the comparison with what the loader under test handed out.

A `Config` is one use of torch's constructor: map-style or iterable data; `batch_size` (None
included), `drop_last`; sequential order, `shuffle` with or without a seeded `generator`, an
explicit `sampler` or `batch_sampler`; torch's collate or a custom one with non-tensor batches;
a `worker_init_fn`; 0-3 workers, prefetch 1-4, persistent or not, in order or not; 1-3 epochs.
`configs()` draws them (Hypothesis); `str(config)` is a ready-to-run `DataLoader(...)` line.

`torch_epochs(config)` is what torch's single-process path hands out, epoch by epoch, built only
from torch's public pieces: the constructor's `batch_sampler` / `sampler`, `collate_fn` and
`generator`. Two things torch's iterator does are kept: it draws each iterator's worker
`base_seed` from the generator before the sampler draws (documented: "consuming a RNG state
mandatorily"), once per iterator, so persistent workers draw it once; and with workers, an
IterableDataset's batches are made per worker (each worker's shard, batched and collated on its
own) and handed out round robin while each worker has any left.

`compare(grade, config, r)` grades the run: the same batches as torch (a multiset with
`in_order=False`); with `shuffle`, a permutation per epoch that differs across epochs is the MUST,
the same order as torch for a seeded generator is what a drop-in SHOULD give (no spec property
grades it: `Grade.should`, NON-STRICT); `len(loader)` is torch's wherever torch's has one; an
abandoned epoch 0 (iterable, persistent workers) handed out torch's first batches and the next
epoch is whole; worker info and seeds as torch defines them (`base_seed + id`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import strategies as st
from loaderspec.conformance.harness.grading import Grade
from loaderspec.faultinject.datasets import FaultyDataset, FaultyIterable
from loaderspec.faultinject.driver import Leave, Plan, Run, describe
from loaderspec.faultinject.events import Error, Len, Stop
from torch.utils.data import DataLoader as TorchLoader

from loaderspec.vocabulary import PropertyName

__all__ = [
    "DROP_IN_ORDER",
    "MORE_PICKS",
    "QUICK_PICKS",
    "Config",
    "collate_as_dict",
    "compare",
    "configs",
    "items",
    "keep_going",
    "torch_epochs",
    "torch_len",
]


def collate_as_dict(batch: Any) -> dict[str, Any]:
    """A custom collate_fn whose batches are no tensors: `{"items": [...], "size": n}`."""
    items = list(batch) if isinstance(batch, list) else [batch]
    return {"items": items, "size": len(items)}


def keep_going(worker_id: int) -> None:
    """A user's worker_init_fn that does nothing (the harness records each call around it)."""


# A drop-in's order: torch's own permutation for a seeded generator is what a drop-in SHOULD
# give (another sampler may draw differently), graded NON-STRICT, never a silent PASS. That the
# order is drawn from the user's generator alone is a MUST (OrderFromUserGenerator, issue 36):
# test_drop_in_batching's case plays the same generator under two global seeds.
DROP_IN_ORDER = "a drop-in's order for a seeded generator is torch's"

SAMPLINGS = ("sequential", "shuffle", "shuffle_seeded", "sampler", "batch_sampler")


@dataclass(frozen=True)
class Config:
    """One configuration of torch's constructor (see the module docstring)."""

    n: int = 8  # map-style length
    shards: tuple[int, ...] | None = None  # iterable: shard lengths
    batch_size: int | None = 1
    drop_last: bool = False
    sampling: str = "sequential"
    order: tuple[int, ...] = ()  # the explicit sampler's indices
    batches: tuple[tuple[int, ...], ...] = ()  # the explicit batch_sampler's batches
    seed: int = 0  # the seeded generator's seed
    custom_collate: bool = False
    init_fn: bool = False
    workers: int = 0
    prefetch: int = 2
    persistent: bool = False
    in_order: bool = True
    epochs: int = 1
    abandon: int | None = None  # leave epoch 0 (del) after this many batches (iterable, persistent)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def iterable(self) -> bool:
        return self.shards is not None

    def dataset(self) -> Any:
        return FaultyIterable(self.shards) if self.shards is not None else FaultyDataset(self.n)

    def kwargs(self) -> dict[str, Any]:
        """The constructor's arguments (a fresh seeded generator each call)."""
        kw: dict[str, Any] = {"num_workers": self.workers, "in_order": self.in_order}
        if self.sampling == "batch_sampler":
            kw["batch_sampler"] = [list(b) for b in self.batches]
        else:
            kw["batch_size"] = self.batch_size
            if self.batch_size is not None:
                kw["drop_last"] = self.drop_last
        if self.sampling in ("shuffle", "shuffle_seeded"):
            kw["shuffle"] = True
        if self.sampling == "shuffle_seeded":
            kw["generator"] = torch.Generator().manual_seed(self.seed)
        if self.sampling == "sampler":
            kw["sampler"] = list(self.order)
        if self.custom_collate:
            kw["collate_fn"] = collate_as_dict
        if self.init_fn:
            kw["worker_init_fn"] = keep_going
        if self.workers:
            kw["prefetch_factor"] = self.prefetch
            kw["persistent_workers"] = self.persistent
        return kw

    def plan(self) -> Plan:
        return Plan(
            n=self.n,
            shards=self.shards,
            kwargs=self.kwargs(),
            epochs=self.epochs,
            leave={} if self.abandon is None else {0: Leave("drop", self.abandon)},
            render="structure",
            record_inits=self.workers > 0,
            len_of_loader=True,
        )

    def __str__(self) -> str:
        """A ready-to-run line: the dataset, the constructor, the epochs."""
        data = f"FaultyIterable({list(self.shards)})" if self.shards else f"FaultyDataset({self.n})"
        args = []
        for key, value in self.kwargs().items():
            if key == "generator":
                args.append(f"generator=torch.Generator().manual_seed({self.seed})")
            elif callable(value):
                args.append(f"{key}=conformance.harness.batching.{value.__name__}")
            else:
                args.append(f"{key}={value!r}")
        left = "" if self.abandon is None else f", epoch 0 left (del) after {self.abandon} batches"
        return f"DataLoader({data}, {', '.join(args)}) for {self.epochs} epoch(s){left}"

    def covers(self) -> set[str]:
        """The parts of the contract this configuration plays with data to play them on (what
        `tests/conformance/test_harness_drawn.py` asserts the draws cover)."""
        if self.iterable and not any(self.shards or ()):
            return {"empty"}
        if not self.iterable and (
            self.n == 0 or (self.sampling == "batch_sampler" and not self.batches)
        ):
            return {"empty"}
        out = {"iterable" if self.iterable else "map", f"sampling={self.sampling}"}
        batching = "batch_size=None" if self.batch_size is None else "batched"
        if self.sampling == "batch_sampler":
            batching = "batched"
        out.add(f"{batching}, {'custom' if self.custom_collate else 'default'} collate")
        if self.workers and self.persistent and self.epochs > 1:
            out.add("persistent epochs")
        if self.abandon is not None:
            out.add("abandoned persistent iterable epoch")
        return out


@st.composite
def configs(draw: st.DrawFn) -> Config:
    """Hypothesis strategy of `Config`s (small: every example starts real workers). The data is
    never empty (an empty epoch plays no collate path; the exactly-once cases cover it), a
    `batch_sampler` always has batches, and an iterable with persistent workers over several
    epochs may leave epoch 0 after its first batch."""
    workers = draw(st.integers(0, 3))
    persistent = workers > 0 and draw(st.booleans())
    epochs = draw(st.integers(1, 3))
    abandon = None
    if draw(st.booleans()):
        shards = (draw(st.integers(1, 6)), *draw(st.lists(st.integers(0, 6), max_size=2)))
        cfg = Config(shards=shards, n=0)
        if persistent and epochs > 1 and draw(st.booleans()):
            abandon = 1
    else:
        cfg = Config(n=draw(st.integers(1, 13)))
        sampling = draw(st.sampled_from(SAMPLINGS))
        cfg = replace(cfg, sampling=sampling, seed=draw(st.integers(0, 2**16)))
        if sampling == "sampler":
            order = draw(st.permutations(range(cfg.n)))
            cfg = replace(cfg, order=tuple(order[: draw(st.integers(1, cfg.n))]))
        if sampling == "batch_sampler":
            sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
            order = draw(st.permutations(range(cfg.n)))
            batches, i = [], 0
            for size in sizes:
                if i == cfg.n:
                    break
                batches.append(tuple(order[i : i + size]))
                i += len(batches[-1])
            cfg = replace(cfg, batches=tuple(batches))
    return replace(
        cfg,
        batch_size=draw(st.one_of(st.none(), st.integers(1, 5))),
        drop_last=draw(st.booleans()),
        custom_collate=draw(st.booleans()),
        init_fn=draw(st.booleans()),
        workers=workers,
        prefetch=draw(st.integers(1, 4)),
        persistent=persistent,
        in_order=draw(st.booleans()),
        epochs=epochs,
        abandon=abandon,
    )


# Hand-picked configurations every run plays before the drawn ones: each part of the contract at
# least once, whatever the draw.
QUICK_PICKS = (
    Config(n=9, batch_size=2, sampling="shuffle", workers=2, epochs=3, init_fn=True),
    Config(shards=(5, 2), n=0, batch_size=2, drop_last=True, workers=2, custom_collate=True),
    Config(n=6, sampling="batch_sampler", batches=((5, 1), (0,), (4, 2, 3)), workers=2),
    Config(n=5, batch_size=None, workers=2, prefetch=1),
    Config(shards=(5, 4), n=0, batch_size=2, workers=2, persistent=True, epochs=2, abandon=1),
    Config(n=12, batch_size=3, sampling="shuffle_seeded", seed=11, workers=2, persistent=True),
    Config(n=7, batch_size=2, sampling="sampler", order=(6, 0, 5, 1, 4), workers=2),
)
MORE_PICKS = (
    Config(n=7, batch_size=3, sampling="sampler", order=(6, 0, 5, 1, 4), workers=2, prefetch=1),
    Config(
        n=7,
        sampling="batch_sampler",
        batches=((6,), (0, 3), (1, 2, 4, 5)),
        workers=3,
        custom_collate=True,
    ),
    Config(n=5, batch_size=None, custom_collate=True, workers=1, prefetch=4),
    Config(shards=(3, 2), n=0, batch_size=None, workers=2, persistent=True, epochs=2, abandon=1),
    Config(shards=(3, 5), n=0, batch_size=2, drop_last=True, workers=2, in_order=False),
    Config(
        n=10,
        batch_size=3,
        sampling="shuffle_seeded",
        seed=7,
        workers=2,
        persistent=True,
        epochs=2,
        in_order=False,
    ),
)


# --------------------------------------------------------------------------- torch's answer


def _chunks(items: Iterator[Any], size: int | None, drop_last: bool) -> Iterator[list[Any]]:
    if size is None:
        yield from ([x] for x in items)
        return
    batch: list[Any] = []
    for x in items:
        batch.append(x)
        if len(batch) == size:
            yield batch
            batch = []
    if batch and not drop_last:
        yield batch


def torch_epochs(cfg: Config) -> tuple[list[list[Any]], list[int]]:
    """torch's batches (described, `faultinject.driver.describe`) epoch by epoch, and the worker
    base seeds its iterators draw (one per iterator)."""
    with warnings.catch_warnings():  # torch's "suggested max number of worker" advice
        warnings.simplefilter("ignore")
        tl = TorchLoader(cfg.dataset(), **cfg.kwargs())
    auto = tl.batch_sampler is not None  # automatic batching
    epochs: list[list[Any]] = []
    seeds: list[int] = []
    for epoch in range(cfg.epochs):
        if epoch == 0 or not cfg.persistent:
            seeds.append(
                int(torch.empty((), dtype=torch.int64).random_(generator=tl.generator).item())
            )
        if cfg.iterable:
            out = _iterable_batches(cfg, tl)
        elif auto:
            assert tl.batch_sampler is not None  # auto-collation: torch made one
            out = [tl.collate_fn([tl.dataset[i] for i in b]) for b in tl.batch_sampler]
        else:
            out = [tl.collate_fn(tl.dataset[i]) for i in tl.sampler]
        epochs.append([describe(b) for b in out])
    return epochs, seeds


def _iterable_batches(cfg: Config, tl: TorchLoader) -> list[Any]:
    assert isinstance(tl.dataset, FaultyIterable)
    ds = tl.dataset
    if cfg.workers == 0:
        streams = [ds.expected()]
    else:
        streams = [ds.expected(w, cfg.workers) for w in range(cfg.workers)]
    size = cfg.batch_size
    per_worker = [
        [
            tl.collate_fn(b if size is not None else b[0])
            for b in _chunks(iter(s), size, tl.drop_last)
        ]
        for s in streams
    ]
    out: list[Any] = []
    for turn in range(max((len(p) for p in per_worker), default=0)):
        out.extend(p[turn] for p in per_worker if turn < len(p))
    return out


# --------------------------------------------------------------------------- the comparison


def _sorted(batches: list[Any]) -> list[Any]:
    return sorted(batches, key=repr)


def items(batches: list[Any]) -> list[str]:
    """Every value in the batches, in order (a described batch's leaves)."""
    out: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        else:
            out.append(repr(x))

    for b in batches:
        walk(b)
    return out


def torch_len(cfg: Config) -> int | None:
    """`len()` of torch's loader for `cfg` (None: torch's raises TypeError, an iterable)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return len(TorchLoader(cfg.dataset(), **cfg.kwargs()))
        except TypeError:
            return None


def _compare_len(grade: Grade, cfg: Config, r: Run, replay: str) -> bool:
    """`len(loader)` is torch's (where torch's has one); False when it failed the case."""
    want = torch_len(cfg)
    if want is None:
        return True
    got = r.first(Len, epoch=None)
    if got is None or got.length != want:
        seen = "no len event" if got is None else got.length
        if got is None and (error := r.first(Error, epoch=None)) is not None:
            seen = error.text
        grade.fail(PropertyName.EXACTLY_ONCE, f"len(loader) {want}, as torch's", f"{seen}{replay}")
        return False
    return True


def _compare_abandoned(grade: Grade, cfg: Config, r: Run, want: list[Any], replay: str) -> bool:
    """Epoch 0 left after `cfg.abandon` batches: those are torch's first ones (any of torch's
    with in_order=False); False when it failed the case."""
    got = r.batches(0)
    ok = len(got) == cfg.abandon and (
        got == want[: len(got)] if cfg.in_order else all(b in want for b in got)
    )
    if not ok:
        grade.fail(
            PropertyName.EXACTLY_ONCE,
            f"epoch 0: torch's first {cfg.abandon} of {want}, then left",
            f"{got}{replay}",
        )
    return ok


def compare(grade: Grade, cfg: Config, r: Run) -> None:
    """Grade run `r` of `cfg` against torch (see the module docstring)."""
    expected, seeds = torch_epochs(cfg)
    replay = f"; replay: {cfg}"
    if not _compare_len(grade, cfg, r, replay):
        return
    shuffled = cfg.sampling in ("shuffle", "shuffle_seeded")
    same_order = True
    for epoch, want in enumerate(expected):
        got = r.batches(epoch)
        if epoch == 0 and cfg.abandon is not None and not r.of(0, Stop):
            if not _compare_abandoned(grade, cfg, r, want, replay):
                return
            continue
        if not r.of(epoch, Stop) or r.of(epoch, Error):
            grade.fail(
                PropertyName.EXACTLY_ONCE,
                f"epoch {epoch}: {len(want)} batches then StopIteration",
                f"{got[:4]}... then {r.last(epoch)}{replay}",
            )
            return
        if not shuffled:
            ok = got == want if cfg.in_order else _sorted(got) == _sorted(want)
            if not ok:
                grade.fail(
                    PropertyName.EXACTLY_ONCE, f"epoch {epoch}: torch's {want}", f"{got}{replay}"
                )
                return
            continue
        # A shuffle: the same items in the same kind of batches, in some order.
        if sorted(items(got)) != sorted(items(want)) or len(got) != len(want):
            grade.fail(
                PropertyName.EXACTLY_ONCE,
                f"epoch {epoch}: a permutation of torch's {want}",
                f"{got}{replay}",
            )
            return
        same_order = same_order and got == want
    if shuffled and cfg.epochs > 1 and cfg.n >= 8:
        orders = [items(r.batches(e)) for e in range(cfg.epochs)]
        if all(o == orders[0] for o in orders[1:]):
            grade.fail(
                PropertyName.EXACTLY_ONCE,
                "shuffle: a different order in each epoch",
                f"the same order in all {cfg.epochs} epochs{replay}",
            )
            return
    if cfg.sampling == "shuffle_seeded" and cfg.in_order and not same_order:
        grade.should(
            DROP_IN_ORDER, f"order differs from torch's for the same seeded generator{replay}"
        )
    _compare_workers(grade, cfg, r, seeds, replay)


def _compare_workers(grade: Grade, cfg: Config, r: Run, seeds: list[int], replay: str) -> None:
    """TypeOK: worker_init_fn(id) with get_worker_info() agreeing, seeds base_seed + id, each
    worker started once per iterator (once in all with persistent workers), and started at all:
    the harness's worker_init_fn (around the user's, if any) ran in some worker."""
    starts = cfg.epochs if not cfg.persistent else 1
    if cfg.workers and not r.inits:
        grade.fail(
            PropertyName.TYPE_OK,
            f"worker_init_fn run in each of {cfg.workers} workers",
            f"never run{replay}",
        )
        return
    by_base: dict[int, list[int]] = {}
    for init in r.inits:
        if init.worker_id_arg != init.worker_id or init.num_workers != cfg.workers:
            grade.fail(
                PropertyName.TYPE_OK,
                f"worker_init_fn(id) == get_worker_info().id, num_workers {cfg.workers}",
                f"{init}{replay}",
            )
            return
        by_base.setdefault(init.seed - init.worker_id, []).append(init.worker_id)
    for base, ids in by_base.items():
        if len(ids) != len(set(ids)) or not set(ids) <= set(range(cfg.workers)):
            grade.fail(
                PropertyName.TYPE_OK,
                "each worker once per iterator, seed base_seed + id",
                f"ids {sorted(ids)} with base seed {base}{replay}",
            )
            return
    if len(by_base) > starts:
        grade.fail(
            PropertyName.TYPE_OK,
            f"workers started {starts} time(s)",
            f"{len(by_base)} base seeds{replay}",
        )
        return
    if cfg.sampling == "shuffle_seeded" and r.inits and sorted(by_base) != sorted(seeds):
        grade.note(f"worker base seeds {sorted(by_base)} differ from torch's {seeds} (SHOULD)")
