"""Many ranks at once: play a loader on a `torch.distributed` group and grade what each rank saw.

`play_ranks(loader_cls, plan)` plays a `faultinject.ranks.RankPlan` (2 or 3 ranks on a gloo group
over loopback, each in its own process, the whole group in one sandbox) and turns what a case
cannot judge into its outcome, as `play` does for one process: a refused configuration SKIPs, a
group past its deadline FAILs the case's MUST property naming what each rank did last, a rank
that raised outside the loader's calls fails the case.

The checks read the `Run` against torch's own `DistributedSampler` (the oracle: what rank r
reads in epoch e after `set_epoch(e)`), one per rank property (`loaderspec.vocabulary`, checked
only here: the spec models one loader process):

* `even_batches` (RanksEvenBatchCounts): every rank hands out the same number of batches each
  epoch, so DDP's per-step all_reduce pairs up; a rank left alone in one is named with the
  counts (the group's collective timeout stands in for DDP's 30-minute hang).
* `partition` (RanksPartitionEveryEpoch): each rank hands out exactly its sampler's (or its
  iterable shard's) items, so across ranks every item once per epoch, padding apart.
* `same_permutation` (RanksShareEpochPermutation): each rank's order is its sampler's after
  `set_epoch(e)`: the ranks cut one permutation per epoch, a new one each epoch.
* `nothing_left` (ShutdownCompletes): no rank, worker, /dev/shm entry or listening port left.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from loaderspec.conformance.harness import scenario
from loaderspec.conformance.harness.checks import nothing_left
from loaderspec.conformance.harness.grading import MUST_BOUND_S, Grade, fail
from loaderspec.faultinject import driver, loaders
from loaderspec.faultinject.driver import RankPlan, Run
from loaderspec.faultinject.events import Batch, Error, Raised, StepFailed, Stop, WorkersLeft
from loaderspec.faultinject.ranks import expected_indices

from loaderspec.vocabulary import PropertyName

__all__ = [
    "EVEN",
    "PARTITION",
    "PERMUTATION",
    "RANKS_DEADLINE_S",
    "RankPlan",
    "even_batches",
    "nothing_left",
    "partition",
    "play_ranks",
    "same_permutation",
]

EVEN = PropertyName.RANKS_EVEN_BATCH_COUNTS
PARTITION = PropertyName.RANKS_PARTITION_EVERY_EPOCH
PERMUTATION = PropertyName.RANKS_SHARE_EPOCH_PERMUTATION
# A group of 3 ranks with 2 workers each plays 3 epochs in well under a second; a rank left alone
# in an all_reduce waits the plan's step timeout (3 s). The rest is margin for a loaded machine.
RANKS_DEADLINE_S = 30.0


def play_ranks(
    loader_cls: type, plan: RankPlan, *, must: PropertyName = EVEN, deadline_s: float | None = None
) -> Run:
    """Play `plan` on its ranks (see the module docstring); SKIP, or FAIL `must`, as `play`. The
    deadline is `RANKS_DEADLINE_S`, and the seconds the loader declares an `iter()` takes to
    start its workers for each iterator of each rank (they share the machine's cores)."""
    if deadline_s is None:
        start_s = loaders.iterator_start_s(loader_cls)
        deadline_s = RANKS_DEADLINE_S + plan.iterators * plan.world * start_s
    key = scenario.loader_key(loader_cls)
    # Once the loader hung before its first batch in earlier cases, the short deadline of
    # harness.scenario, plus one HUNG_DEADLINE_S for the group's start (its process group).
    full_deadline_s = deadline_s
    if scenario.hung_at_start(loader_cls):
        short_s = scenario.hang_deadline(loader_cls, deadline_s) + scenario.HUNG_DEADLINE_S
        deadline_s = min(deadline_s, short_s)
    if key in scenario._ALIVE_AFTER_DROP:  # its workers outlived a drop: see harness.scenario
        plan = replace(plan, drop_wait_s=scenario.LEAK_WAIT_AFTER_LEAK_S)
    r = driver.run(loader_cls, plan, deadline_s=deadline_s)
    left = [e for e in r.of(None, WorkersLeft) if e.pids]
    if left and plan.drop_wait_s >= MUST_BOUND_S:
        scenario._ALIVE_AFTER_DROP.setdefault(key, scenario.current_case())
    if left and plan.drop_wait_s < MUST_BOUND_S:
        r.leak_note = (
            f"waited {plan.drop_wait_s:g} s: {scenario.ALIVE_PATTERN} {MUST_BOUND_S:g} s in "
            f"{scenario._ALIVE_AFTER_DROP[key]}"
        )
    if r.refused:
        pytest.skip(f"the loader refused the configuration: {r.refused}")
    report = r.report
    assert report is not None
    if report.outcome == "deadline":
        # No rank got a batch, an error or StopIteration: a hang at iter(), counted as `play`
        # counts it (one pattern for every player).
        started = any(r.of(None, kind) for kind in (Batch, Error, Stop))
        note = scenario.past_deadline(loader_cls, started, deadline_s, full_deadline_s)
        if note is None:  # it started under the short deadline: slow, not hung; all of it
            return play_ranks(loader_cls, plan, must=must, deadline_s=full_deadline_s)
        fail(must, f"the {plan.world} ranks to end within {deadline_s:g} s", _last_moves(r) + note)
    if report.outcome != "returned":
        pytest.fail(f"the rank group did not end normally: {report.error}", pytrace=False)
    raised = r.of(None, Raised)
    if raised:
        rank, text = raised[0].rank, raised[0].text
        pytest.fail(f"rank {rank} raised outside the loader's calls: {text}", pytrace=False)
    return r


def _plan(r: Run) -> RankPlan:
    """The rank plan `r` played (the checks here read a rank group's run only)."""
    if not isinstance(r.plan, RankPlan):
        raise TypeError(f"a rank group's run to grade, got a {type(r.plan).__name__}'s")
    return r.plan


def _last_moves(r: Run) -> str:
    moves = []
    for rank in range(_plan(r).world):
        mine = [e for e in r.events if e.rank == rank]
        last = f"{mine[-1].name} in epoch {mine[-1].epoch}" if mine else "nothing"
        moves.append(f"rank {rank}: {len(r.of(None, Batch, rank=rank))} batches, then {last}")
    return "still running at the deadline (" + "; ".join(moves) + "); killed"


def _counts(r: Run, epoch: int) -> str:
    world = range(_plan(r).world)
    return ", ".join(f"rank {rank}: {len(r.batches(epoch, rank=rank))}" for rank in world)


def even_batches(grade: Grade, r: Run) -> None:
    """RanksEvenBatchCounts: each epoch ends in StopIteration on every rank after the same
    number of batches, and no rank was left alone in a step's all_reduce."""
    failed = r.of(None, StepFailed)
    hang = ""
    if failed:
        f = failed[0]
        hang = (
            f"; rank {f.rank}'s all_reduce after its batch {f.step} of epoch {f.epoch}"
            f" failed after {f.dt:.1f} s ({f.text[:100]}): DDP's ranks would hang there"
        )
    for epoch in range(_plan(r).epochs):
        counts = {len(r.batches(epoch, rank=rank)) for rank in range(_plan(r).world)}
        if r.of(epoch, StepFailed) or len(counts) > 1:
            grade.fail(
                EVEN,
                f"every rank to hand out the same number of batches in epoch {epoch}",
                _counts(r, epoch) + hang,
            )
            return
        for rank in range(_plan(r).world):
            errors = r.of(epoch, Error, rank=rank)
            if errors:
                grade.fail(EVEN, f"epoch {epoch} to end on rank {rank}", errors[0].text)
                return
            if not r.of(epoch, Stop, rank=rank):
                grade.fail(EVEN, f"epoch {epoch} to end on rank {rank}", "it never ended")
                return


def _who(r: Run, epoch: int) -> dict[Any, list[int]]:
    """Item -> the ranks that handed it out in `epoch` (a rank once per time it did)."""
    out: dict[Any, list[int]] = {}
    for rank in range(_plan(r).world):
        for x in r.items(epoch, rank=rank):
            out.setdefault(x, []).append(rank)
    return out


def partition(grade: Grade, r: Run) -> None:
    """RanksPartitionEveryEpoch: each rank hands out exactly the items its sampler (or its
    iterable shard) gives it; so, across ranks, every item once an epoch (DistributedSampler's
    padding apart: it repeats the first items so that every rank gets as many)."""
    plan = _plan(r)
    for epoch in range(plan.epochs):
        for rank in range(plan.world):
            want = Counter(expected_indices(plan, rank, epoch))
            got = Counter(r.items(epoch, rank=rank))
            if got == want:
                continue
            who = _who(r, epoch)
            padded = Counter(x for k in range(plan.world) for x in expected_indices(plan, k, epoch))
            twice = [
                f"{x} by ranks {v}" for x, v in _sorted(who.items()) if len(v) > max(1, padded[x])
            ]
            missing = _sorted(set(range(plan.n)) - set(who))
            # What a user sees comes first: a report's note shows only the detail's first words.
            seen = []
            if twice:
                seen.append(f"duplicated items (handed out more than once: {', '.join(twice[:4])})")
            if missing:
                seen.append(f"lost items (by no rank: {missing[:8]})")
            actual = "; ".join(seen) + (": " if seen else "")
            actual += f"rank {rank} handed out {_sorted(got.elements())}"
            actual += f", its {_source(plan)} gives {_sorted(want.elements())}"
            grade.fail(
                PARTITION,
                f"each rank to hand out exactly its {_source(plan)}'s items in epoch {epoch}",
                actual,
            )
            return


def _sorted(values: Any) -> list[Any]:
    """Sorted as numbers where they are numbers (a loader may hand out anything)."""
    values = list(values)
    try:
        return sorted(values)
    except TypeError:
        return sorted(values, key=repr)


def _source(plan: RankPlan) -> str:
    return "iterable shard" if plan.iterable else "DistributedSampler"


def same_permutation(grade: Grade, r: Run) -> None:
    """RanksShareEpochPermutation: each rank hands its items out in its sampler's order after
    `set_epoch(epoch)`: one permutation per epoch cut among the ranks, a new one every epoch."""
    plan = _plan(r)
    for epoch in range(plan.epochs):
        for rank in range(plan.world):
            got = r.items(epoch, rank=rank)
            want = expected_indices(plan, rank, epoch)
            if got == want:
                continue
            actual = f"rank {rank} handed out {got}, its sampler gives {want}"
            stale = [e for e in range(plan.epochs) if e != epoch]
            same = [e for e in stale if expected_indices(plan, rank, e) == got]
            if same:
                actual += f": the order of epoch {same[0]} (set_epoch({epoch}) had no effect)"
            grade.fail(
                PERMUTATION,
                f"epoch {epoch}'s order on every rank: its sampler's after set_epoch({epoch})",
                actual,
            )
            return
