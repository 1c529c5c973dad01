"""IterationTerminates (MUST): every next() returns, raises StopIteration or raises an error
(never hangs), unless a worker hangs and no timeout is set."""

from __future__ import annotations

import re
from typing import Literal

import pytest
from loaderspec.conformance.harness import (
    EVERY,
    Grade,
    Hang,
    Raise,
    RaiseUnrebuildable,
    Run,
    Tensors,
    Unpicklable,
    checks,
    hang_s,
    kwargs,
    play,
    spec_property,
)
from loaderspec.faultinject.events import Call, Error, Stop

from loaderspec.vocabulary import PropertyName

PROP = PropertyName.ITERATION_TERMINATES


def _expect_error_in_turn(grade: Grade, got: list[Call], position: int, pattern: str) -> None:
    error = got[position] if len(got) > position else None
    if not isinstance(error, Error):
        grade.fail(PROP, f"an error as result {position}", f"results {[e.name for e in got]}")
        return
    text = error.text
    if not re.search(pattern, text, re.S):
        grade.fail(PROP, f"an error matching {pattern!r}", text[:300])


def _first_error(r: Run) -> Error | None:
    errors = r.of(0, Error)
    return errors[0] if errors else None


@pytest.mark.quick
@spec_property(PROP)
def test_timeout_raises_when_a_worker_hangs(loader_cls: type, grade: Grade) -> None:
    """timeout=1 and a worker hung in __getitem__: next() raises "timed out" after about 1 s.

    Property: IterationTerminates. Seed (dataloader.py, _try_get_data): "raise
    RuntimeError(f'DataLoader timed out after {timeout} seconds')".
    Guards: B4 pytorch/pytorch#21554 (a stuck worker hangs the loader).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Hang(2, hang_s(loader_cls)),),
        kwargs=kwargs(2, 2, batch_size=1, timeout=1),
    )
    got = r.calls()
    _expect_error_in_turn(grade, got, 2, r"timed out")
    grade.bounded(PROP, "timeout_overshoot_s", max(0.0, got[2].dt - 1.0), "timeout error")
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP, PropertyName.NO_DUPLICATE_DELIVERY)
@pytest.mark.parametrize("where", ["dataset", "collate"])
def test_error_is_raised_in_turn_and_iteration_continues(
    loader_cls: type, grade: Grade, where: str
) -> None:
    """A ValueError in __getitem__ or collate_fn is re-raised as a ValueError in its batch's turn,
    naming the worker, and the other batches still come, in order, then StopIteration.

    Property: IterationTerminates. Seed (worker loop): "data = ExceptionWrapper(where=f'in
    DataLoader worker process {worker_id}')", re-raised by "_process_data".
    Guards: H3 pytorch test_error_workers semantics (iteration goes on after an error).
    """
    point: Literal["in_fetch", "in_collate"] = "in_fetch" if where == "dataset" else "in_collate"
    r = play(
        loader_cls,
        n=12,
        faults=(Raise(5, ValueError, "boom-5", point=point),),
        max_errors=1,
        kwargs=kwargs(2, 2, batch_size=2),
    )
    got = r.calls()
    _expect_error_in_turn(grade, got, 2, r"boom-5")
    checks.raised(grade, got[2], "ValueError", "boom-5", PROP)
    text = got[2].text if isinstance(got[2], Error) else ""
    if "worker" not in text.lower():
        grade.fail(PROP, "the error names the worker", text[:300])
    expected = [[0, 1], [2, 3], [6, 7], [8, 9], [10, 11]]
    if r.batches() != expected or not isinstance(got[-1], Stop):
        grade.fail(PROP, f"then {expected} and StopIteration", f"{r.batches()} then {r.last()}")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.NO_DEADLOCK)
def test_every_item_raising_gives_one_error_per_batch(loader_cls: type, grade: Grade) -> None:
    """Every __getitem__ raises: 9 items, batch size 2 -> exactly 5 errors, then StopIteration.

    Property: IterationTerminates. Seed (worker loop): an exception is a result like any other;
    the main process re-raises it and "tasks_outstanding" goes down.
    Guards: H3 pytorch test_error_workers (41 items, bs 2 -> 21 errors then StopIteration).
    """
    r = play(
        loader_cls,
        n=9,
        faults=(Raise(EVERY, ValueError, "always"),),
        max_errors=20,
        kwargs=kwargs(3, 2, batch_size=2),
    )
    calls = r.calls()
    if [type(e) for e in calls] != [Error] * 5 + [Stop]:
        grade.fail(PROP, "5 errors then StopIteration", f"{[e.name for e in calls]}")
    for error in r.of(0, Error):
        checks.raised(grade, error, "ValueError", "always", PROP)
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP)
def test_worker_init_fn_error_is_raised(loader_cls: type, grade: Grade) -> None:
    """worker_init_fn raises in worker 0: next() raises that ValueError (its own type), never hangs.

    Property: IterationTerminates. Seed (worker loop): "init_exception = ExceptionWrapper(where=
    f'in DataLoader worker process {worker_id}')".
    Guards: H2 pytorch PR #20150 (test_error_in_init).
    """
    r = play(
        loader_cls,
        n=8,
        faults=(Raise(0, ValueError, "init-boom", point="in_worker_init"),),
        max_errors=3,
        kwargs=kwargs(2, 2, batch_size=1),
    )
    checks.raised(grade, _first_error(r), "ValueError", "init-boom", PROP)
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_unrebuildable_exception_keeps_its_message(loader_cls: type, grade: Grade) -> None:
    """An exception whose constructor needs two arguments arrives with its type name and text.

    Property: IterationTerminates. Seed (ExceptionWrapper.reraise): when the type cannot be
    rebuilt from the message, a RuntimeError carrying the formatted message is raised instead.
    Guards: H1 pytorch/pytorch#30147 (TypeError: __init__() missing argument instead).
    """
    r = play(
        loader_cls,
        n=6,
        faults=(RaiseUnrebuildable(2),),
        max_errors=1,
        kwargs=kwargs(1, 2, batch_size=1),
    )
    errors = r.of(0, Error)
    text = re.escape(RaiseUnrebuildable(2).text())
    if not errors or not re.search(rf"UnrebuildableError.*{text}", errors[0].text, re.S):
        grade.fail(PROP, f"an error naming UnrebuildableError with {text!r}", f"{errors[:1]}")
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_unpicklable_result_raises_instead_of_hanging(loader_cls: type, grade: Grade) -> None:
    """A result the worker cannot pickle makes next() raise (within 15 s), not wait forever.

    Property: IterationTerminates. Seed (NOTE, 3a): "hanging on get() can still happen when data
    in queue is corrupted" - the loader must guard every get.
    Guards: B2 pytorch/pytorch#142884 (feeder thread dies on a pickling error; loader hangs).
    """
    r = play(
        loader_cls,
        deadline_s=20.0,
        n=6,
        faults=(Unpicklable(2),),
        max_errors=1,
        kwargs=kwargs(1, 2, batch_size=1),
    )
    errors = r.of(0, Error)
    if not errors:
        grade.fail(PROP, "an error for the unpicklable result", f"events {r.last()}")
    grade.bounded(PROP, "unpicklable_reported_s", errors[0].dt, "pickling failure raised")
    checks.nothing_left(grade, r)


@spec_property(PROP)
def test_fd_exhaustion_gives_a_clear_error_or_completes(loader_cls: type, grade: Grade) -> None:
    """50 file descriptors to spare (RLIMIT_NOFILE) and 40 tensors per item: either every batch,
    or an error naming the file-descriptor limit; never a hang.

    Property: IterationTerminates. Seed (torch NOTE "DataLoader on Linux and open files limit"):
    the file_descriptor sharing strategy needs one fd per tensor in flight.
    Guards: G1 pytorch/pytorch#973 (received 0 items of ancdata), G2 pytorch/pytorch#25691 (hang
    when fds run out).
    """
    r = play(
        loader_cls,
        deadline_s=20.0,
        n=8,
        item=Tensors(40),
        fd_headroom=50,
        max_errors=2,
        kwargs=kwargs(2, 2, batch_size=2),
    )
    errors = r.of(0, Error)
    clear = r"open files|file descriptor|ancdata|ulimit|sharing.strategy|Too many"
    if errors and not re.search(clear, errors[0].text, re.I):
        grade.fail(PROP, f"an error matching {clear!r}", errors[0].text[:300])
    if not errors and len(r.batches()) != 4:
        grade.fail(PROP, "4 batches or a clear error", f"{len(r.batches())} batches, no error")
    checks.nothing_left(grade, r)


@spec_property(PROP, PropertyName.EXACTLY_ONCE)
def test_timeout_bounds_each_next_not_the_epoch(loader_cls: type, grade: Grade) -> None:
    """timeout=2.5 and a slow but healthy epoch (every batch within about 0.4 s, the epoch
    about 3.2 s): no timeout error, every batch.

    Property: IterationTerminates. Seed (DataLoader docs): timeout is "the timeout value for
    collecting a batch from workers", one next() at a time.
    Guards: B4 pytorch/pytorch#21554 (timeout semantics: a stuck batch, not a long epoch).
    """
    r = play(
        loader_cls,
        n=32,
        cost_s=0.2,
        kwargs=kwargs(2, 2, batch_size=2, timeout=2.5),
    )
    expected = [[i, i + 1] for i in range(0, 32, 2)]
    if r.of(0, Error) or r.batches() != expected:
        errors = [e.text for e in r.of(0, Error)]
        grade.fail(PROP, f"{expected} and no error", f"{r.batches()}, errors {errors}")
    checks.nothing_left(grade, r)


@pytest.mark.quick
@spec_property(PROP, PropertyName.PROMPT_FAULT_HANDLING, PropertyName.EXACTLY_ONCE)
def test_iterable_epoch_ends_promptly_after_its_last_item(loader_cls: type, grade: Grade) -> None:
    """IterableDataset, 3 workers with 2, 3 and 1 items, cheap: no next() after the first, the
    final StopIteration included, waits for an exhausted worker.

    Property: IterationTerminates (bounded: 15 s MUST, 0.5 s SHOULD). Seed (worker loop): an
    exhausted worker sends "_IterableDatasetStopIteration" and the main process stops asking
    it ("_mark_worker_as_unavailable"); nothing waits for it to exit before the epoch ends.
    Guards: D4 pytorch PR #19228 (exhausted workers retired while the others go on), A2
    pytorch/pytorch#39570 (a join timeout waited out per worker).
    """
    r = play(loader_cls, shards=(2, 3, 1), kwargs=kwargs(3, 2, batch_size=1))
    calls = r.calls()
    if not r.of(0, Stop):
        grade.fail(PropertyName.EXACTLY_ONCE, "the epoch to end in StopIteration", f"{r.last()}")
    slowest = max((e.dt for e in calls[1:]), default=0.0)
    grade.bounded(PROP, "slowest_next_after_first_s", slowest, "next() of a cheap epoch")
    checks.nothing_left(grade, r)
