"""Every conformance case fails on a deliberately broken loader (one bug each), and the whole
suite passes on the reference loader leaving nothing behind.

The (case selector, broken loader) pairs are packed into a few pytest runs (``plan_groups``); in
each run ``broken.dispatch:Loader`` builds, for the running case, the broken loader assigned to
it, so the cost is a few interpreter starts instead of one per broken loader. The runs and the
reference's whole-suite run go at once (they mostly wait on bounded timeouts, not on the CPU);
each test then reads the report.json of its runs and checks the graded outcome of its cases.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from broken.dispatch import NO_PLAN, PLAN_ENV, matches
from conformance_runner import ROOT, outcomes, run_suite, run_whole_suite

C = "conformance/cases/"
IO = C + "test_in_order_delivery.py"
EO = C + "test_exactly_once.py"
IT = C + "test_iteration_terminates.py"
SC = C + "test_shutdown_completes.py"
WD = C + "test_worker_death_raises.py"

# broken module -> (expected outcome, selectors: files or file::function)
BROKEN: dict[str, tuple[str, list[str]]] = {
    "reorders": ("FAIL", [IO]),
    "drops_batch": (
        "FAIL",
        [
            EO + "::test_map_style_epoch_hands_out_every_batch_once",
            EO + "::test_iterable_epoch_hands_out_every_item_once",
            EO + "::test_every_start_method_hands_out_every_batch[fork]",
            C + "test_no_deadlock.py",
            IT + "::test_fd_exhaustion_gives_a_clear_error_or_completes",
        ],
    ),
    "duplicates": ("FAIL", [C + "test_no_duplicate_delivery.py"]),
    "wrong_len": ("FAIL", [EO + "::test_len_matches_the_batches_handed_out"]),
    "breaks_under_spawn": (
        "FAIL",
        [
            EO + "::test_every_start_method_hands_out_every_batch[spawn]",
            EO + "::test_every_start_method_hands_out_every_batch[forkserver]",
        ],
    ),
    "no_timeout": ("FAIL", [IT + "::test_timeout_raises_when_a_worker_hangs"]),
    "stops_after_error": (
        "FAIL",
        [
            IT + "::test_error_is_raised_in_turn_and_iteration_continues",
            IT + "::test_every_item_raising_gives_one_error_per_batch",
        ],
    ),
    "hides_error_message": (
        "FAIL",
        [
            IT + "::test_worker_init_fn_error_is_raised",
            IT + "::test_unrebuildable_exception_keeps_its_message",
        ],
    ),
    "swallows_errors": (
        "FAIL",
        [
            WD,
            C + "test_no_silent_loss.py",
            IT + "::test_unpicklable_result_raises_instead_of_hanging",
        ],
    ),
    "hangs_after_worker_death": ("FAIL", [C + "test_fail_stop_after_worker_death.py"]),
    "ignores_prefetch_bound": ("FAIL", [C + "test_prefetch_bound.py"]),
    "leaks_workers": (
        "FAIL",
        [
            SC + "::test_leaving_an_epoch_early_stops_every_worker",
            SC + "::test_dropping_a_persistent_loader_stops_its_workers",
            SC + "::test_stuck_worker_is_terminated_at_shutdown",
            SC + "::test_timeout_then_drop_leaves_no_hung_worker",
        ],
    ),
    "stale_epoch": ("FAIL", [C + "test_no_stale_epoch_delivery.py"]),
    "restarts_after_stop": ("FAIL", [C + "test_no_delivery_after_shutdown.py"]),
    "never_pins": ("FAIL", [C + "test_pin_thread_exits_first.py"]),
    "reseeds_workers": (
        "FAIL",
        [C + "test_type_ok.py::test_worker_info_and_seeds_are_per_worker_and_per_epoch"],
    ),
    "ignores_worker_init_fn": (
        "FAIL",
        [C + "test_type_ok.py::test_worker_init_fn_runs_before_the_worker_fetches"],
    ),
    "survives_parent": ("FAIL", [C + "test_no_orphan_workers.py"]),
    "keeps_exhausted_worker": (
        "FAIL",
        [
            C + "test_no_deadlock.py::test_uneven_iterable_shards_are_all_drained[True]",
            C + "test_no_deadlock.py::test_uneven_iterable_shards_are_all_drained[False]",
        ],
    ),
    "slow_death_report": ("NON-STRICT", [C + "test_prompt_fault_handling.py"]),
    "leaks_shared_batches": (
        "FAIL",
        [SC + "::test_worker_killed_holding_a_shared_batch_leaves_nothing"],
    ),
}

RUN_TIMEOUT_S = 420.0
GROUPS = 5
# Broken loaders whose cases mostly wait out a 15-30 s bound (leak grace, scenario deadline, orphan
# watch): spread over the groups first, so they wait side by side.
WAITS = {
    "leaks_workers",
    "survives_parent",
    "keeps_exhausted_worker",
    "hangs_after_worker_death",
    "no_timeout",
    "swallows_errors",
}


def _matches(nodeid: str, selector: str) -> bool:
    return matches(nodeid, selector)


def _overlap(a: str, b: str) -> bool:
    """Whether selectors ``a`` and ``b`` can select a common case."""
    file_a, _, fn_a = a.partition("::")
    file_b, _, fn_b = b.partition("::")
    if file_a != file_b:
        return False
    if not fn_a or not fn_b:
        return True
    if fn_a.split("[")[0] != fn_b.split("[")[0]:
        return False
    return "[" not in fn_a or "[" not in fn_b or fn_a == fn_b


def _cost(selector: str, name: str) -> int:
    return (30 if name in WAITS else 5) * (1 if "::" in selector else 3)


def plan_groups(names: list[str]) -> list[dict[str, str]]:
    """Assign every (selector, broken loader) pair to one of a few pytest runs (selector ->
    loader, run by broken.dispatch): heaviest first, each to the least loaded run where it does
    not overlap a selector already there (a case gets one loader per run)."""
    pairs = sorted(
        ((sel, name) for name in names for sel in BROKEN[name][1]),
        key=lambda p: _cost(*p),
        reverse=True,
    )
    groups: list[dict[str, str]] = [{} for _ in range(GROUPS)]
    loads = [0] * GROUPS
    for sel, name in pairs:
        free = [g for g in range(len(groups)) if not any(_overlap(sel, s) for s in groups[g])]
        if not free:
            groups.append({})
            loads.append(0)
            free = [len(groups) - 1]
        g = min(free, key=loads.__getitem__)
        groups[g][sel] = name
        loads[g] += _cost(sel, name)
    return [g for g in groups if g]


def _collect() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "--co", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return [line.strip() for line in out.splitlines() if "::" in line]


def _reference_run(report: Path) -> Any:
    return run_whole_suite(report, 500)


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Start the runs this session needs, all at once: the broken loaders it selected, packed
    into a few pytest runs (plan_groups), and the reference's whole-suite run."""
    wanted = [
        name
        for name in BROKEN
        if any(
            item.originalname == "test_broken_loader_fails_its_cases"
            and item.callspec.params["name"] == name
            for item in request.session.items
        )
    ]
    groups = plan_groups(wanted)
    pool = concurrent.futures.ThreadPoolExecutor(len(groups) + 1)
    reference = None
    if any(
        i.originalname == "test_whole_suite_on_the_reference_passes_and_leaves_nothing"
        for i in request.session.items
    ):
        report = tmp_path_factory.mktemp("reference")
        reference = (report, pool.submit(_reference_run, report))
    futures: dict[str, Any] = {name: [] for name in wanted}
    for i, group in enumerate(groups):
        directory = tmp_path_factory.mktemp(f"group{i}")
        plan = directory / "plan.json"
        plan.write_text(json.dumps(group))
        future = pool.submit(
            run_suite,
            list(group),
            "broken.dispatch:Loader",
            directory / "report",
            RUN_TIMEOUT_S,
            extra_env={PLAN_ENV: str(plan)},
        )
        for name in set(group.values()):
            futures[name].append((future, [s for s, n in group.items() if n == name]))
    futures["__reference__"] = reference
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def test_every_case_has_a_broken_loader_that_catches_it() -> None:
    cases = _collect()
    assert cases, "no conformance cases collected"
    uncovered = [
        c for c in cases if not any(_matches(c, s) for _, sels in BROKEN.values() for s in sels)
    ]
    assert uncovered == [], f"cases no broken loader is shown to fail: {uncovered}"


def test_every_broken_loader_module_is_used() -> None:
    modules = {p.stem for p in (Path(__file__).parent / "broken").glob("*.py")}
    assert modules - {"__init__", "_wrap", "dispatch"} == set(BROKEN)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_loader_fails_its_cases(runs: dict[str, Any], name: str) -> None:
    expected, selectors = BROKEN[name]
    got: dict[str, str] = {}
    output = ""
    for future, mine in runs[name]:
        code, out, results = future.result()
        output += out[-2000:]
        assert results is not None, f"no report.json (exit {code}):\n{out[-3000:]}"
        for case in results["cases"]:
            if any(_matches(case["nodeid"], s) for s in mine):
                assert NO_PLAN not in case["detail"], case["detail"]
                assert "broken/dispatch.py" not in case["detail"], case["detail"]
                got[case["nodeid"]] = case["outcome"]
    assert got, f"none of {selectors} ran:\n{output[-3000:]}"
    assert {s for s in selectors if any(_matches(n, s) for n in got)} == set(selectors)
    wrong = {n: o for n, o in got.items() if o != expected}
    assert wrong == {}, f"expected {expected} on broken.{name}, got {wrong}\n{output[-3000:]}"


def test_plan_gives_each_case_one_loader_per_run() -> None:
    groups = plan_groups(list(BROKEN))
    assert len(groups) < len(BROKEN)
    planned = sorted((s, n) for g in groups for s, n in g.items())
    assert planned == sorted((s, n) for n, (_, sels) in BROKEN.items() for s in sels)
    for group in groups:
        sels = list(group)
        assert not any(_overlap(a, b) for i, a in enumerate(sels) for b in sels[i + 1 :])


@pytest.mark.slow
def test_whole_suite_on_the_reference_passes_and_leaves_nothing(runs: dict[str, Any]) -> None:
    """No FAIL; no process or zombie left (the run's orphans are re-parented to the sandbox
    child, a subreaper, so none can hide under init); no /dev/shm entry named with a pid of the
    run (other programs' segments are not the suite's)."""
    report, future = runs["__reference__"]
    sandboxed = future.result()
    assert sandboxed.outcome == "returned", sandboxed.error
    info = sandboxed.value
    assert sandboxed.lingering == [], f"processes left: {sandboxed.lingering}"
    assert sandboxed.zombies == [], f"zombies left: {sandboxed.zombies}"
    assert sandboxed.leaked_shm == [], f"/dev/shm entries left: {sandboxed.leaked_shm}"
    got = outcomes(json.loads((report / "report.json").read_text()))
    assert len(got) > 40, info["tail"]
    fails = {n: o for n, o in got.items() if o == "FAIL"}
    assert fails == {}, f"the reference loader fails cases:\n{info['tail']}"
    assert info["rc"] == 0, info["tail"]
