"""Checkpoint and resume: play a loader's `state_dict()` / `load_state_dict()` and grade it
against an uninterrupted run of the same loader.

`play_resume(loader_cls, plan)` plays a `faultinject.resume.ResumePlan` (the uninterrupted run,
then the interrupted one: one loader per segment, each resuming from the state the one before it
took) in a sandbox, and turns what a case cannot judge into its outcome, as `play` does: a loader
without the two methods SKIPs (`needs_state`), a refused configuration SKIPs, a scenario past its
deadline FAILs the case's MUST property. The checks, one reading per property of
spec/DataLoaderCheckpoint.tla (`loaderspec.vocabulary.CHECKPOINT_PROPERTIES`):

* `same_stream`: what the interrupted run kept, then what its last loader handed out, is epoch
  by epoch what the uninterrupted run handed out (the same sequence; a multiset with
  `in_order=False`); any error on the way (a load, an `iter()`, a `next()`, a `state_dict()`)
  fails it too. The case says which property a difference violates.
* `immutable` (SnapshotIsImmutable): a state pickles the same at the end of its segment as when
  `state_dict()` returned it; whether it survives `torch.save` / `torch.load(weights_only=True)`
  is noted (no property grades it yet).
* `topology` (ResumeTopologyExplicit, SHOULD): resumed with another `num_workers`, the loader
  continues exactly, or raises an error naming both counts; an AssertionError (or an error that
  names neither) grades NON-STRICT; a silent wrong stream is a ResumeEquivalence FAIL.

`configs` draws configurations and checkpoint moments for the differential cases.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal, TypeGuard

import pytest
from hypothesis import reject
from hypothesis import strategies as st
from loaderspec.conformance.harness import scenario
from loaderspec.conformance.harness.checks import nothing_left
from loaderspec.conformance.harness.grading import Grade, fail
from loaderspec.conformance.harness.scenario import LEAK_WAIT_S
from loaderspec.faultinject import driver, loaders
from loaderspec.faultinject.driver import Run
from loaderspec.faultinject.events import Batch, Error, Event, NoState, StateChanged, StateTaken
from loaderspec.faultinject.faults import Raise
from loaderspec.faultinject.plan import Cut, Moment, ResumePlan

from loaderspec.vocabulary import PropertyName

__all__ = [
    "ADVANCES",
    "EQUIVALENCE",
    "HANDED_OUT",
    "IMMUTABLE",
    "LOAD",
    "MOST_ITERATORS",
    "NO_STATE",
    "RESUME_DEADLINE_S",
    "TOPOLOGY",
    "Cut",
    "ResumePlan",
    "Run",
    "configs",
    "drawn_iterators",
    "errors",
    "immutable",
    "needs_state",
    "nothing_left",
    "play_resume",
    "resume_plan",
    "resumed",
    "same_stream",
    "topology",
    "uninterrupted",
]

EQUIVALENCE = PropertyName.RESUME_EQUIVALENCE
HANDED_OUT = PropertyName.CHECKPOINT_IS_HANDED_OUT
IMMUTABLE = PropertyName.SNAPSHOT_IS_IMMUTABLE
LOAD = PropertyName.LOAD_IS_NEVER_IGNORED
ADVANCES = PropertyName.RESUME_ADVANCES
TOPOLOGY = PropertyName.RESUME_TOPOLOGY_EXPLICIT
NO_STATE = "the loader has no state_dict()/load_state_dict(): it cannot be checkpointed"
# Up to four loaders one after the other (the uninterrupted one, then a segment per cut), each
# a few epochs with up to 3 workers: a few seconds; the rest is margin for a loaded machine.
RESUME_DEADLINE_S = 40.0
# The most iter() calls one plan makes (`ResumePlan.iterators`): a drawn one's (`configs`) 3
# epochs uninterrupted, 3 interrupted and 2 cuts; a case's own plan makes no more (`play_resume`
# refuses one that does). A case declares its iterators (the `iterators` marker) from it: a
# loader that declares a slow start gets that much more pytest-timeout limit (conformance.plugin).
MOST_ITERATORS = 8
# Plays of a drawn case besides its picks and examples: the leak check's replay of the last
# example, and, when an example fails, the shrink step running when the shrink budget ends and
# Hypothesis's replay of the smallest failing example.
_EXTRA_PLAYS = 3


def needs_state(loader_cls: type) -> None:
    """SKIP the running case unless the loader can be checkpointed (`NO_STATE`)."""
    if not loaders.stateful(loader_cls):
        pytest.skip(f"not applicable: {NO_STATE}")


def drawn_iterators(examples: int, picks: tuple[ResumePlan, ...]) -> int:
    """At most how many iter() calls a drawn resume case makes (its `iterators` marker): its
    picks', then `MOST_ITERATORS` for each drawn example and each other play (`_EXTRA_PLAYS`)."""
    return sum(p.iterators for p in picks) + (examples + _EXTRA_PLAYS) * MOST_ITERATORS


def play_resume(
    loader_cls: type,
    plan: ResumePlan,
    *,
    must: PropertyName = EQUIVALENCE,
    leaks: bool = True,
    skip_refused: bool = True,
    deadline_s: float | None = None,
) -> Run:
    """Play `plan` (see the module docstring); `skip_refused=False`: reject the example of a
    drawn case instead (Hypothesis draws another). The deadline is `RESUME_DEADLINE_S`, and the
    seconds the loader declares an `iter()` takes to start its workers for each iterator the plan
    starts (`faultinject.loaders.iterator_start_s`; none for a loader that declares nothing)."""
    if plan.iterators > MOST_ITERATORS:
        raise ValueError(
            f"a plan of {plan.iterators} iter() calls; the cases declare at most "
            f"MOST_ITERATORS={MOST_ITERATORS} per plan: raise it, or play fewer epochs or cuts"
        )
    needs_state(loader_cls)
    if deadline_s is None:
        deadline_s = RESUME_DEADLINE_S + plan.iterators * loaders.iterator_start_s(loader_cls)
    full_deadline_s, deadline_s = deadline_s, scenario.hang_deadline(loader_cls, deadline_s)
    # The first step (a batch, a state) comes within a plain scenario's whole deadline, or the
    # loader hangs at iter() (scenario.past_deadline).
    first_s = scenario.DEADLINE_S + loaders.iterator_start_s(loader_cls)
    r = driver.run(
        loader_cls,
        plan,
        deadline_s=deadline_s,
        linger_s=LEAK_WAIT_S if leaks else 0,
        first_event_s=first_s,
    )
    if r.refused:
        if not skip_refused:
            reject()
        pytest.skip(f"the loader refused the configuration: {r.refused}")
    report = r.report
    assert report is not None
    if report.outcome == "deadline":
        last = ", ".join(f"{e.name} (segment {e.seg})" for e in r.events[-4:])
        last = last or f"nothing ({min(deadline_s, first_s):g} s without a first batch or state)"
        # No step at all: a hang at iter(), counted as `play` counts it.
        note = scenario.past_deadline(loader_cls, bool(r.events), deadline_s, full_deadline_s)
        if note is None:  # it started under the short deadline: slow, not hung; all of it
            again: dict[str, Any] = {"must": must, "leaks": leaks, "skip_refused": skip_refused}
            return play_resume(loader_cls, plan, deadline_s=full_deadline_s, **again)
        fail(must, f"the scenario to end within {deadline_s:g} s", f"still running: {last}{note}")
    if report.outcome != "returned":
        pytest.fail(f"the resume scenario did not end normally: {report.error}", pytrace=False)
    return r


def describe(plan: ResumePlan) -> str:
    """The scenario as a line a reader can replay."""
    data = f"iterable shards {list(plan.shards)}" if plan.shards else f"{plan.n} items"
    if plan.shards and plan.dataset_state:
        data += " (a dataset with its own state_dict)"
    if plan.user is not None:
        data += f" ({plan.user.replace('_', ' ')})"
    if plan.global_seed is not None:
        data += f", torch.manual_seed({plan.global_seed}) before each loader"
    args = ", ".join(f"{k}={v!r}" for k, v in plan.kwargs.items())
    seed = f", generator seeded {plan.seed}" if plan.seed is not None else ""
    if plan.faults:
        seed += f", item {plan.faults[0].at} raises"
    cuts = "; then ".join(_cut(c) for c in plan.cuts)
    again = f"; resumed with {dict(plan.resume_kwargs)}" if plan.resume_kwargs else ""
    moved = f"; before load_state_dict: {plan.before_load}" if plan.before_load != "nothing" else ""
    return f"{data}, {args}{seed}, {plan.epochs} epochs; state {cuts}{again}{moved}"


def _cut(cut: Cut) -> str:
    where = {
        "next": f"after {cut.after} batches of epoch {cut.epoch}",
        "break": f"after a break at {cut.after} batches of epoch {cut.epoch}",
        "end": f"at the end of epoch {cut.epoch}",
        "before_iter": f"before iter() of epoch {cut.epoch}",
        "after_load": "right after load_state_dict",
    }[cut.how]
    if cut.earlier is not None:
        where += f" (and after {cut.earlier}, resumed from the {cut.resume_from} one)"
    return where


def resume_plan(r: Run) -> ResumePlan:
    """The resume plan `r` played (the checks here read a resume scenario's run only)."""
    if not isinstance(r.plan, ResumePlan):
        raise TypeError(f"a resume scenario's run to grade, got a {type(r.plan).__name__}'s")
    return r.plan


def errors(r: Run) -> list[Error]:
    """The errors the interrupted run met (a load, iter(), next(), state_dict()), but those
    the plan's faults raise in their turn (they are part of the stream compared)."""
    return [e for e in r.of(None, Error) if _interrupted(e.seg) and not _injected(r, e)]


def _interrupted(seg: int | None) -> bool:
    """Whether segment `seg` is the interrupted run's (-1: the uninterrupted one's)."""
    return seg is not None and seg >= 0


def _injected(r: Run, e: Error) -> bool:
    """An error next() raised for one of the plan's faults (its type, re-raised in turn)."""
    kinds = {f.exc_type.__name__ for f in resume_plan(r).faults}
    return e.at is None and e.type in kinds


def same_stream(grade: Grade, r: Run, prop: PropertyName = EQUIVALENCE) -> None:
    """`prop`: the interrupted run hands out, epoch by epoch, what the uninterrupted one did."""
    plan = resume_plan(r)
    full_errors = [e for e in r.of(None, Error, seg=-1) if not _injected(r, e)]
    if full_errors:
        grade.fail(prop, "an uninterrupted run without errors", full_errors[0].text)
        return
    bad = errors(r)
    if bad:
        e = bad[0]
        where = f"{e.at or 'next'}() of segment {e.seg}" if e.at != "load" else "load_state_dict()"
        grade.fail(prop, f"the resume to go on ({describe(plan)})", f"{where} raised {e.text}")
        return
    full, got = uninterrupted(r), resumed(r)
    ordered = plan.kwargs.get("in_order", True) is not False
    ended = r.of(None, NoState)
    last = ended[0].epoch if ended and ended[0].epoch is not None else plan.epochs - 1
    for epoch in range(last + 1):
        want, have = full[epoch], got[epoch]
        if ended and epoch == last:
            # A fault raised in the loop before its break: the run ended there with no state
            # to resume from (its own outcome); what it handed out must begin the epoch (out of
            # order: be of it).
            if ordered:
                want = want[: len(have)]
            elif not Counter(map(str, have)) - Counter(map(str, want)):
                continue
        if (want == have) if ordered else (sorted(map(str, want)) == sorted(map(str, have))):
            continue
        # What a user sees comes first: a report's note shows only the detail's first words.
        grade.fail(
            prop,
            f"epoch {epoch} as the uninterrupted run handed it out",
            f"{_diagnosis(want, have)}: {have}, uninterrupted {want} ({describe(plan)})",
        )
        return
    if ended:
        grade.note(
            f"the interrupted run ended at a fault in epoch {last} after {ended[0].after} batches,"
            " before its break: no state to resume from, graded up to there"
        )


def uninterrupted(r: Run) -> dict[int, list[Any]]:
    """Epoch -> the batches the uninterrupted run handed out."""
    out: dict[int, list[Any]] = {e: [] for e in range(r.plan.epochs)}
    for ev in r.of(None, seg=-1):
        if ev.epoch is not None and _handed_out(ev):
            out[ev.epoch].append(_value(ev))
    return out


def resumed(r: Run) -> dict[int, list[Any]]:
    """Epoch -> the batches the interrupted run handed out that count: every segment's up
    to the state the next one resumed from, then the last segment's."""
    out: dict[int, list[Any]] = {e: [] for e in range(r.plan.epochs)}
    for ev in r.events:
        if _interrupted(ev.seg) and ev.epoch is not None and _handed_out(ev) and ev.kept:
            out[ev.epoch].append(_value(ev))
    return out


def _handed_out(ev: Event) -> TypeGuard[Batch | Error]:
    """A batch, or an error handed out in its turn by next()."""
    return isinstance(ev, Batch) or (isinstance(ev, Error) and ev.at is None)


def _value(ev: Batch | Error) -> Any:
    return ev.value if isinstance(ev, Batch) else [f"error {ev.type}"]


def _diagnosis(want: list[Any], have: list[Any]) -> str:
    """What a user sees: a restart from zero, duplicated items, lost items, or the same items
    in another order."""
    flat_want = [x for b in want for x in b]
    flat_have = [x for b in have for x in b]
    repeated = sorted({str(x) for x in flat_have if flat_have.count(x) > flat_want.count(x)})
    lost = sorted({str(x) for x in flat_want if flat_have.count(x) < flat_want.count(x)})
    parts = []
    again = len(have) - len(want)
    if again > 0 and have[again:] == want:
        parts.append(f"a restart from zero (the whole epoch again after {again} batches)")
    if repeated:
        parts.append(f"duplicated items: {', '.join(repeated[:6])}")
    if lost:
        parts.append(f"lost items: {', '.join(lost[:6])}")
    return "; ".join(parts) or "the same items in another order"


def immutable(grade: Grade, r: Run) -> None:
    """SnapshotIsImmutable: no state changed after `state_dict()` returned it. Notes a state
    that `torch.load(weights_only=True)` cannot read back."""
    changed = r.of(None, StateChanged)
    if changed:
        c = changed[0]
        grade.fail(
            IMMUTABLE,
            f"the state taken after {c.after} batches of epoch {c.epoch} to stay as returned",
            "it pickles differently once the loader went on (it is the loader's live state)",
        )
        return
    portable = [s.weights_only for s in r.of(None, StateTaken) if s.weights_only]
    if portable:
        grade.note(f"a state does not survive torch.load(weights_only=True): {portable[0]}")


def topology(grade: Grade, r: Run) -> None:
    """ResumeTopologyExplicit: resumed with another num_workers, the same stream, or an error
    naming both counts (an AssertionError, or one naming neither, is NON-STRICT)."""
    bad = errors(r)
    if not bad:
        same_stream(grade, r, EQUIVALENCE)
        return
    e = bad[0]
    before = r.plan.kwargs.get("num_workers", 0)
    after = (resume_plan(r).resume_kwargs or {}).get("num_workers", 0)
    numbers = set(re.findall(r"\d+", e.text))
    if e.type == "AssertionError" or not {str(before), str(after)} <= numbers:
        grade.non_strict(
            TOPOLOGY,
            None,
            f"resumed with num_workers={after} (state of num_workers={before}): {e.at or 'next'}()"
            f" raised {e.text[:160]!r}, not an error naming both counts",
        )


# --------------------------------------------------------------------------- drawn scenarios


@st.composite
def configs(draw: st.DrawFn) -> ResumePlan:
    """A configuration and a checkpoint moment: map-style (sometimes with an item that raises)
    or iterable (with or without a dataset state), 0-3 workers, prefetch 1-3, persistent,
    in_order, shuffle with a seeded generator, 1-3 epochs; a state after some batches (maybe
    none, or after the fault), after a break, at an epoch's end or before iter(); sometimes
    twice in one epoch, or a second resume fewer than num_workers batches after the first."""
    workers = draw(st.integers(0, 3))
    bs = draw(st.integers(1, 3))
    iterable = draw(st.booleans())
    kwargs: dict[str, Any] = {"batch_size": bs, "num_workers": workers}
    if workers:
        kwargs["prefetch_factor"] = draw(st.integers(1, 3))
        kwargs["persistent_workers"] = draw(st.booleans())
        kwargs["in_order"] = draw(st.booleans())
    seed = None
    faults: tuple[Raise, ...] = ()
    if iterable:
        shards = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
        n, stateful = sum(shards), draw(st.booleans())
        per_worker = [shards[w :: max(workers, 1)] for w in range(max(workers, 1))]
        batches = sum(-(-sum(s) // bs) for s in per_worker)
    else:
        shards, stateful = None, False
        n = draw(st.integers(4, 16))
        batches = -(-n // bs)
        if draw(st.booleans()):
            kwargs["shuffle"] = True
            seed = draw(st.integers(0, 2**16))
        # a fault: an item raises, in its turn, every epoch (in a worker: a trace of the
        # reference logs a fetch error with the worker that raised it)
        if workers and draw(st.integers(0, 3)) == 0:
            faults = (Raise(draw(st.integers(0, n - 1))),)
    epochs = draw(st.integers(1, 3))
    epoch = draw(st.integers(0, epochs - 1))
    # "after_iter": a "next" state after 0 batches, between iter() and the epoch's first next(),
    # where a loader that draws its shuffle at the first next() has no order of the epoch's to
    # save. A moment of its own (a sixth of the draws, taken from every moment alike), not a low
    # bound of 0 for "next", which Hypothesis favours: over 1,000 draws that left 286 mid-epoch
    # states of the 357 there were before; this way, 312.
    moments: list[Moment | Literal["after_iter"]] = [
        *("next", "next", "break", "end", "before_iter", "after_iter")
    ]
    moment = draw(st.sampled_from(moments))
    how: Moment = "next" if moment == "after_iter" else moment
    if how in ("next", "break") and batches < 1:
        how = "end"
    drawn = how in ("next", "break") and batches > 0 and moment != "after_iter"
    after = draw(st.integers(1, batches)) if drawn else 0
    cuts = [Cut(epoch, after, how)]
    if how == "next" and after >= 2 and draw(st.booleans()):
        cuts = [Cut(epoch, after, how, earlier=draw(st.integers(1, after - 1)))]
    elif how == "next" and after < batches and draw(st.booleans()):
        # resumed, then a state again after fewer than num_workers of the resumed loader's batches
        again = draw(st.integers(0, min(max(workers - 1, 0), batches - after - 1)))
        cuts.append(Cut(epoch, again, "next"))
    return ResumePlan(
        n=n,
        shards=shards,
        dataset_state=stateful,
        kwargs=kwargs,
        seed=seed,
        epochs=epochs,
        cuts=tuple(cuts),
        faults=faults,
    )
