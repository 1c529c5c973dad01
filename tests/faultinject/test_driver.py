"""The driver plays a plan against any loader in a sandbox: what the user saw, event by event;
what the loader cannot express, as a refusal; what it left behind, counted before anything reaps
it."""

from __future__ import annotations

import signal

import fi_loaders as L
import pytest
from loaderspec.faultinject import loaders
from loaderspec.faultinject.driver import Await, Leave, Plan, describe, flat, run
from loaderspec.faultinject.events import (
    AliveAfterDrop,
    Awaited,
    Batch,
    Built,
    Dropped,
    Error,
    Killed,
    Len,
    LoaderDropped,
    Stop,
)
from loaderspec.faultinject.faults import EVERY, Die, Hang, Raise
from loaderspec.faultinject.plans import parent_dies_while
from torch.utils.data import DataLoader

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_child_left")]

FORK2 = {"num_workers": 2, "multiprocessing_context": "fork", "batch_size": 2}


def test_an_epoch_is_a_batch_event_per_next_then_stop():
    r = run(DataLoader, Plan(n=5, kwargs=FORK2, len_of_loader=True), deadline_s=60)
    assert r.report is not None
    assert r.report.outcome == "returned", r.report.error
    assert [type(e) for e in r.calls()] == [Batch, Batch, Batch, Stop]
    assert r.batches() == [[0, 1], [2, 3], [4]]
    assert r.first(Len, epoch=None).length == 3
    assert r.report.clean, r.report.leftovers()


def test_a_len_that_raises_is_an_error_event_and_the_epoch_goes_on():
    # An IterableDataset without __len__: torch's len(loader) raises TypeError.
    plan = Plan(shards=(3,), kwargs={"batch_size": 2}, len_of_loader=True)
    r = run(DataLoader, plan, deadline_s=60)
    assert r.report is not None
    assert r.report.outcome == "returned", r.report.error
    error = r.first(Error, epoch=None)
    assert (error.type, error.at) == ("TypeError", "len")
    assert r.batches() == [[0, 1], [2]]


def test_faults_go_where_they_fire():
    plan = Plan(
        n=6,
        faults=(
            Raise(1, ValueError, "in fetch"),
            Raise(4, ValueError, "in collate", point="in_collate"),
            Raise(1, ValueError, "in init", point="in_worker_init"),
        ),
        max_errors=5,
        kwargs={**FORK2, "batch_size": 1},
    )
    r = run(DataLoader, plan, deadline_s=60)
    errors = [e.text for e in r.of(0, Error)]
    assert any("in fetch" in e for e in errors), errors
    assert any("in collate" in e for e in errors), errors
    assert any("in init" in e for e in errors), errors


def test_a_worker_killed_from_outside_after_a_fetch_is_awaited():
    plan = Plan(
        n=12,
        kill_worker_after=2,
        before_kill=Await("fetched", index=5),
        max_errors=1,
        stop_at_fatal=True,
        records=True,
        kwargs={"num_workers": 2, "batch_size": 1},
    )
    r = run(DataLoader, plan, deadline_s=60)
    awaited, killed = r.first(Awaited), r.first(Killed)
    assert awaited is not None
    assert awaited.ok is True
    assert killed is not None
    assert len(killed.pids) == 1
    assert any(f.event == "fetched" and f.index == 5 for f in r.fetches)
    assert r.of(0, Error), r.events  # the death reached the user as an error


@pytest.mark.parametrize("how", ["drop", "break", "raise"])
def test_leaving_an_epoch_early_is_timed_and_the_workers_are_watched(how):
    r = run(DataLoader, Plan(n=40, kwargs=FORK2, leave={0: Leave(how, 2)}), deadline_s=60)
    assert len(r.batches()) == 2
    assert r.first(Dropped) is not None
    assert r.first(AliveAfterDrop).pids == ()


def test_next_after_stop_is_recorded():
    r = run(DataLoader, Plan(n=2, kwargs=FORK2, calls_after_stop=2), deadline_s=60)
    assert [type(e) for e in r.calls()] == [Batch, Stop, Stop, Stop]


def test_a_hang_past_the_deadline_leaves_its_events():
    plan = Plan(n=8, faults=(Hang(2),), kwargs={"num_workers": 1, "batch_size": 1})
    r = run(DataLoader, plan, deadline_s=3, linger_s=1)
    assert r.report is not None
    assert r.report.outcome == "deadline"
    assert len(r.batches()) == 2  # streamed before the hang: the record survives the kill


def test_the_parent_killed_while_workers_are_blocked_on_a_full_pipe():
    plan = Plan(
        n=8,
        faults=(Die(EVERY, signal=None, point="blocked_put"),),
        leave={0: Leave("kill_parent", 0)},
        before_leave=Await("fetched", count=2),
        kwargs={"num_workers": 2, "batch_size": 1},
    )
    r = run(L.DeclaresForkOnly, plan, deadline_s=60, orphan_grace_s=1.0)
    assert r.report is not None
    assert (r.report.outcome, r.report.killed_by_signal) == ("killed", signal.SIGKILL)
    assert r.first(Awaited).ok is True
    assert len(r.report.orphan_exit_s) == 2  # each worker timed (torch's stay: None)


@pytest.mark.parametrize("state", ["busy", "blocked"])
def test_the_parent_is_killed_in_state_even_when_workers_start_at_the_first_next(state):
    """Nothing is fetched after iter(): the driver makes the first next() itself (in a thread),
    so the workers reach the state before the loader's process is killed."""
    r = run(L.StartsWorkersAtFirstNext, parent_dies_while(state), deadline_s=60, orphan_grace_s=1.0)
    assert r.report is not None
    assert r.report.outcome == "killed", r.report.error
    assert r.first(Awaited).ok is True
    assert len(r.report.orphan_exit_s) == 2


def test_a_declared_process_wide_helper_is_started_before_the_leak_baseline():
    plan = Plan(n=4, kwargs={"num_workers": 0})
    r = run(L.StartsAProcessWideThread, plan, deadline_s=60, linger_s=0.2)
    assert r.report is not None
    assert r.report.leaked_threads == ["process-wide"]  # undeclared: counted
    r = run(L.DeclaresItsProcessWideThread, plan, deadline_s=60, linger_s=0.2)
    assert r.report is not None
    assert r.report.clean, r.report.leftovers()


def test_a_declared_unsupported_configuration_is_refused_before_anything_starts():
    plan = Plan(n=4, kwargs={"num_workers": 2, "multiprocessing_context": "spawn"})
    assert loaders.unsupported(L.DeclaresForkOnly, dict(plan.kwargs)) == L.NO_SPAWN
    r = run(L.DeclaresForkOnly, plan, deadline_s=60)
    assert (r.refused, r.report) == (L.NO_SPAWN, None)


def test_not_implemented_in_the_constructor_is_a_refusal_with_its_message():
    r = run(L.RefusesInConstructor, Plan(n=4, kwargs={"in_order": False}), deadline_s=60)
    assert r.refused == L.NO_IN_ORDER
    assert r.report is not None
    assert r.report.outcome == "returned"


def test_an_argument_the_constructor_does_not_take_is_named():
    kwargs = {"num_workers": 0, "timeout": 1.0}
    assert loaders.unsupported(L.TakesFewArguments, kwargs) == (
        loaders.MSG_UNSUPPORTED_ARG.format(name="timeout")
    )
    r = run(L.SwallowsKwargs, Plan(n=4, kwargs=kwargs), deadline_s=60)
    assert r.refused == loaders.MSG_UNSUPPORTED_ARG.format(name="timeout")


def test_any_other_constructor_error_is_not_a_refusal():
    r = run(L.BadArgument, Plan(n=4), deadline_s=60)
    assert r.refused is None
    assert r.report is not None
    assert r.report.outcome == "raised"
    assert "positive integer" in (r.report.error or "")


def test_a_process_the_loader_leaves_running_is_lingering():
    r = run(L.LeaksAProcess, Plan(n=2), deadline_s=60, linger_s=0.5)
    assert r.report is not None
    assert r.report.outcome == "returned", r.report.error
    assert len(r.report.lingering) == 1
    assert not r.report.clean


def test_a_process_nobody_joined_is_a_zombie_counted_before_anything_reaps_it():
    r = run(L.LeavesAZombie, Plan(n=2), deadline_s=60, linger_s=0.5)
    assert r.report is not None
    assert r.report.outcome == "returned", r.report.error
    assert len(r.report.zombies) == 1
    assert r.report.lingering == []


def test_flat_reads_any_batch_as_plain_values():
    import torch

    assert flat(torch.tensor([[1, 2], [3, 4]])) == [1, 2, 3, 4]
    assert flat([torch.tensor([1]), (2, 3)]) == [1, 2, 3]
    assert flat(b"xx") == ["<2 bytes>"]
    assert flat(object())[0].startswith("<object object")


def test_structure_many_loaders_and_dispatch_epochs():
    plan = Plan(n=4, kwargs={**FORK2, "persistent_workers": True}, epochs=2, loaders=2)
    r = run(DataLoader, plan, deadline_s=60)
    fds = [e.fds for e in r.of(None, LoaderDropped)]
    assert len(fds) == 2
    assert r.batches(3) == [[0, 1], [2, 3]]  # loader 2's second epoch
    assert r.first(Built, epoch=None).ref == "torch.utils.data.dataloader:DataLoader"
    r = run(DataLoader, Plan(n=3, kwargs=FORK2, render="structure"), deadline_s=60)
    assert r.batches()[0] == {"tensor": [0, 1], "dtype": "int64"}
    tagged = Plan(n=4, kwargs=FORK2, epochs=2, tag_epochs=True, leave={0: Leave("drop", 1)})
    r = run(DataLoader, tagged, deadline_s=60)
    assert sorted(r.items(1)) == [(i, 1) for i in range(4)]  # (item, epoch dispatched in)


def test_a_dropped_loaders_fd_count_waits_for_the_threads_it_started():
    """A close a loader's thread makes just after the drop is not counted as kept: each
    loader's count is taken once its threads ended (bounded), so the counts are flat."""
    r = run(L.ClosesLaterAfterTheFirst, Plan(n=2, loaders=3), deadline_s=60)
    fds = [e.fds for e in r.of(None, LoaderDropped)]
    assert len(fds) == 3
    assert len(set(fds)) == 1, fds
    assert not r.report.leaked_threads


def test_describe_keeps_types_and_nesting():
    import torch

    batch = {"b": (torch.tensor([1.0]), [b"xy", None]), "a": 3}
    assert describe(batch) == {
        "dict": [
            ["a", 3],
            ["b", {"tuple": [{"tensor": [1.0], "dtype": "float32"}, ["<2 bytes>", None]]}],
        ]
    }
