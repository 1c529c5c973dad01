"""TypeOK (MUST): every variable holds a value of its type - here, what a worker sees of the
protocol: its worker_info, its seed, the worker_init_fn call."""

from __future__ import annotations

import pytest
from loaderspec.conformance.harness import Grade, checks, kwargs, play, spec_property, workers

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.TYPE_OK


@pytest.mark.quick
@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_worker_info_and_seeds_are_per_worker_and_per_epoch(loader_cls: type, grade: Grade) -> None:
    """3 workers, 2 epochs: worker_init_fn gets ids 0..2 once per worker, get_worker_info() agrees,
    seeds are distinct across workers and epochs and equal torch.initial_seed() in the worker.

    Property: TypeOK. Seed (worker loop): "seed = base_seed + worker_id; random.seed(seed);
    torch.manual_seed(seed)", with a fresh base_seed per iterator.
    Guards: J1 pytorch/pytorch#5059 (every worker inherits the same RNG state through fork).
    """
    r = play(loader_cls, n=12, epochs=2, record_inits=True, kwargs=kwargs(3, 2, batch_size=2))
    # torch's RNG is per process: threads share one torch.initial_seed().
    own_rng = workers(loader_cls) == "processes"
    if not own_rng:
        grade.note("thread workers share the process's torch.initial_seed(): not compared")
    inits = [i.__dict__ for i in r.inits]
    if len(inits) != 6:
        grade.fail(PROP, "6 worker_init_fn calls (3 workers x 2 epochs)", f"{len(inits)}")
    for rec in inits:
        if rec["worker_id_arg"] != rec["worker_id"] or rec["num_workers"] != 3:
            grade.fail(PROP, "worker_init_fn(id) == get_worker_info().id, num_workers 3", f"{rec}")
        if rec["seed"] != rec["torch_seed"] and own_rng:
            grade.fail(PROP, "worker_info.seed == torch.initial_seed()", f"{rec}")
    for epoch in range(2):
        ids = sorted(x["worker_id"] for x in inits[epoch * 3 : epoch * 3 + 3])
        if ids != [0, 1, 2]:
            grade.fail(PROP, "ids [0, 1, 2] per epoch", f"{ids}")
    seeds = [x["seed"] for x in inits]
    if len(set(seeds)) != len(seeds):
        grade.fail(PROP, "distinct seeds across workers and epochs", f"{seeds}")
    if (
        r.batches(0) + r.batches(1)
        != [
            [0, 1],
            [2, 3],
            [4, 5],
            [6, 7],
            [8, 9],
            [10, 11],
        ]
        * 2
    ):
        grade.fail(
            PropertyName.EXACTLY_ONCE, "both epochs complete", f"{r.batches(0)}, {r.batches(1)}"
        )
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP)
def test_worker_init_fn_runs_before_the_worker_fetches(loader_cls: type, grade: Grade) -> None:
    """Each worker calls worker_init_fn once, before its first fetch.

    Property: TypeOK. Seed (DataLoader docs): worker_init_fn "will be called on each worker
    subprocess with the worker id ... after seeding and before data loading".
    Guards: H2 pytorch PR #20150 (init errors and ordering of worker start-up).
    """
    r = play(loader_cls, n=12, records=True, record_inits=True, kwargs=kwargs(2, 1, batch_size=3))
    # A worker is a process, or a thread (threads share their process's pid).
    threads = workers(loader_cls) != "processes"
    fetches = [f for f in r.fetches if f.event == "fetch"]
    seen = sorted(
        [(i.t, (i.pid, i.tid if threads else 0), "init") for i in r.inits]
        + [(f.t, (f.pid, f.tid if threads else 0), "fetch") for f in fetches]
    )
    for worker in {w for _, w, _ in seen}:
        mine = [event for _, w, event in seen if w == worker]
        if mine.count("init") != 1 or mine[0] != "init":
            grade.fail(PROP, "init once, before the first fetch", f"worker {worker}: {mine[:5]}")
