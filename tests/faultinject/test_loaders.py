"""One resolver of `pkg.mod:Class` names, and what a loader class says of itself."""

from __future__ import annotations

import fi_loaders as L
import pytest
from loaderspec.faultinject import driver, loaders
from torch.utils.data import DataLoader


@pytest.mark.parametrize("value", ["torch.utils.data:DataLoader", "torch.utils.data.DataLoader"])
def test_both_spellings_resolve(value):
    assert loaders.resolve(value) is DataLoader
    assert loaders.resolve(loaders.ref_of(DataLoader)) is DataLoader


@pytest.mark.parametrize(
    ("value", "template"),
    [
        ("nodots", loaders.MSG_MALFORMED),
        ("no_such_pkg_xyz.mod:Loader", loaders.MSG_NO_MODULE),
        ("torch.utils.data:Missing", loaders.MSG_NO_ATTR),
        ("torch.utils.data:__doc__", loaders.MSG_NOT_CALLABLE),
    ],
)
def test_a_bad_name_says_what_and_where_from_and_the_fix(value, template):
    with pytest.raises(loaders.LoaderRefError) as err:
        loaders.resolve(value, "option --loader")
    message = str(err.value)
    assert repr(value) in message
    assert "option --loader" in message
    assert loaders.FIX in message
    assert template.split("{")[0].strip() in message


def test_a_local_class_has_no_importable_name():
    class Local(DataLoader):
        pass

    with pytest.raises(loaders.LoaderRefError, match="module level"):
        loaders.ref_of(Local)


def test_a_declaration_is_shown_the_plans_dataset():
    """An iterable plan is refused before anything starts by a loader that declares map-style
    only; a map-style plan of the same loader runs."""
    workers = {"num_workers": 2}
    iterable = driver.run(
        L.DeclaresMapStyleOnly, driver.Plan(shards=(2, 2), kwargs=workers), deadline_s=30
    )
    assert iterable.refused == L.NO_ITERABLE
    assert iterable.report is None  # refused before the sandbox started
    mapped = driver.run(L.DeclaresMapStyleOnly, driver.Plan(n=4, kwargs=workers), deadline_s=30)
    assert mapped.refused is None
    assert mapped.report is not None
    assert mapped.report.outcome == "returned"


def test_declarations_and_their_defaults():
    assert loaders.workers_die_with(DataLoader) == "iterator"
    assert loaders.unsupported(DataLoader, {"in_order": False, "timeout": 1.0}) is None
    assert loaders.unsupported(L.DeclaresForkOnly, {"multiprocessing_context": "fork"}) is None
    assert loaders.unsupported(L.DeclaresForkOnly, {"multiprocessing_context": "spawn"}) == (
        L.NO_SPAWN
    )
    assert loaders.unsupported(L.SwallowsKwargs, {"timeout": 1.0}) is None  # **kwargs: it may


def test_what_the_workers_are_is_declared_or_watched():
    assert driver.workers(L.SaysItHasThreads) == "threads"  # declared: not watched
    with pytest.raises(loaders.LoaderRefError, match="fibres"):
        driver.workers(L.SaysNonsense)
    assert driver.probe_workers(DataLoader) == "processes"
    assert driver.probe_workers(L.FetchesInThreads) == "threads"
    assert driver.probe_workers(L.FetchesInTheCaller) == "none"


@pytest.mark.parametrize("value", [-1.0, "5", True, float("nan")])
def test_a_declared_iterator_start_is_seconds_zero_or_more(value):
    assert loaders.iterator_start_s(DataLoader) == 0.0  # declares nothing: the plain bounds

    class Declares(DataLoader):
        loaderspec_iterator_start_s = 2.5

    assert loaders.iterator_start_s(Declares) == 2.5
    Declares.loaderspec_iterator_start_s = value
    with pytest.raises(loaders.LoaderRefError, match="number of seconds"):
        loaders.iterator_start_s(Declares)


def test_a_plan_counts_the_iterators_it_starts():
    """What the declared start cost is multiplied by: every iter() a plan can make."""
    from loaderspec.faultinject.ranks import RankPlan
    from loaderspec.faultinject.resume import Cut, ResumePlan

    assert ResumePlan(epochs=3, cuts=(Cut(0, 2),)).iterators == 3 + 3 + 1
    assert ResumePlan(epochs=2, cuts=(Cut(0, 2), Cut(0, 1)), before_load="iter").iterators == 8
    assert ResumePlan(epochs=2, uninterrupted=False).iterators == 2 + 1
    assert RankPlan(epochs=3).iterators == 3
    assert RankPlan(epochs=3, resume_at=(1, 2)).iterators == 4
