"""Every conformance case fails on a deliberately broken loader (one bug each); the whole suite
passes on the reference loader leaving nothing behind, grades the correct loaders of other designs
(threads, a multiprocessing.Pool, forked processes on pipes, executors: on the quick selection,
and on the whole suite in the nightly tier) without a false FAIL, and grades a loader that leaks
at every shutdown in minutes.

The (case selector, broken loader) pairs are packed into a few pytest runs (``plan_groups``); in
each run ``broken.dispatch:Loader`` builds, for the running case, the broken loader assigned to
it, so the cost is a few interpreter starts instead of one per broken loader. All the runs go at
once (they mostly wait on bounded timeouts, not on the CPU); each test then reads the
report.json of its runs and checks the graded outcome of its cases.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from broken.dispatch import NO_PLAN, PLAN_ENV, matches
from conformance_runner import ROOT, outcomes, run_suite, run_whole_suite
from loaderspec.conformance.harness.matrix import matrix
from loaderspec.conformance.harness.resume import NO_STATE

C = "conformance/cases/"
IO = C + "test_in_order_delivery.py"
EO = C + "test_exactly_once.py"
IT = C + "test_iteration_terminates.py"
SC = C + "test_shutdown_completes.py"
WD = C + "test_worker_death_raises.py"
NDAS = C + "test_no_delivery_after_shutdown.py"
NOW = C + "test_no_orphan_workers.py"
PFH = C + "test_prompt_fault_handling.py"
NSTALE = C + "test_no_stale_epoch_delivery.py"
PE = C + "test_persistent_epochs.py"
FS = C + "test_fail_stop_after_fatal_error.py"
DIB = C + "test_drop_in_batching.py"
NOT = C + "test_no_overtaking.py"
FR = C + "test_failed_reads.py"
TPN = C + "test_timeout_per_next.py"
ORQ = C + "test_orphans_with_results_queued.py"
DRAWN = EO + "::test_batches_are_torchs_for_drawn_configurations"
MORE_DRAWN = EO + "::test_batches_are_torchs_for_more_drawn_configurations"
RP = C + "test_ranks_partition_every_epoch.py"
HO = C + "test_checkpoint_is_handed_out.py"
RE = C + "test_resume_equivalence.py"
US = C + "test_resume_user_state.py"
MORE_RE = RE + "::test_resumed_run_matches_for_more_drawn_configurations"
NFAD = C + "test_no_fetch_after_done.py"
OFUG = C + "test_order_from_user_generator.py"

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
    "wrong_len": ("FAIL", [EO + "::test_len_matches_the_batches_handed_out", DRAWN, MORE_DRAWN]),
    "breaks_under_spawn": (
        "FAIL",
        [
            EO + "::test_every_start_method_hands_out_every_batch[spawn]",
            EO + "::test_every_start_method_hands_out_every_batch[forkserver]",
        ],
    ),
    "no_timeout": (
        "FAIL",
        [
            IT + "::test_timeout_raises_when_a_worker_hangs",
            C + "test_no_silent_loss.py::test_more_drawn_fault_schedules_keep_every_must",
        ],
    ),
    "loses_exception_type": (
        "FAIL",
        [
            IT + "::test_error_is_raised_in_turn_and_iteration_continues",
            IT + "::test_worker_init_fn_error_is_raised",
            IT + "::test_every_item_raising_gives_one_error_per_batch",
        ],
    ),
    "ignores_drop_last_for_iterables": ("FAIL", [DRAWN, MORE_DRAWN]),
    "same_shuffle_every_epoch": ("FAIL", [DRAWN, MORE_DRAWN]),
    "ignores_sampler": (
        "FAIL",
        [DRAWN, MORE_DRAWN, RP + "::test_map_style_ranks_split_every_epoch_between_them"],
    ),
    "ranks_hides_worker_info": (
        "FAIL",
        [RP + "::test_iterable_shards_by_rank_and_worker_cover_every_item_once"],
    ),
    "ranks_unpadded_split": ("FAIL", [C + "test_ranks_even_batch_counts.py"]),
    "ranks_forgets_set_epoch": ("FAIL", [C + "test_ranks_share_epoch_permutation.py"]),
    "resume_counts_prefetched": (
        "FAIL",
        [
            C + "test_resume_equivalence.py",
            HO + "::test_state_counts_handed_out_batches_not_prefetched_ones",
            HO + "::test_batches_fetched_and_waiting_at_the_state_are_handed_out_after_the_resume",
            RP + "::test_each_rank_resumed_from_its_own_state_keeps_its_share",
            RP + "::test_each_rank_resumed_iterable_keeps_its_share",
        ],
    ),
    "resume_replays_finished_epoch": (
        "FAIL",
        [HO + "::test_state_at_an_epoch_end_resumes_at_the_next_epoch"],
    ),
    "resume_forgets_unstarted_order": (
        "FAIL",
        [RE + "::test_resumed_run_hands_out_what_an_uninterrupted_one_does"],
    ),
    "resume_loads_before_iter": (
        "FAIL",
        [
            US + "::test_a_dataset_that_is_its_own_iterator_resumes_where_it_was[0-mid-epoch]",
            US + "::test_a_dataset_that_is_its_own_iterator_resumes_where_it_was[2-mid-epoch]",
            MORE_RE,
        ],
    ),
    "resume_unstarted_iterable_state": (
        "FAIL",
        [
            US + "::test_a_dataset_that_is_its_own_iterator_resumes_where_it_was[0-after-iter]",
            MORE_RE,
        ],
    ),
    "resume_drops_dataset_state_at_end": (
        "FAIL",
        [US + "::test_a_dataset_state_advanced_at_an_epochs_end_is_kept", MORE_RE],
    ),
    "resume_ignores_iterator_state": (
        "FAIL",
        [US + "::test_an_iterators_own_state_is_resumed", MORE_RE],
    ),
    "resume_global_rng_order": (
        "FAIL",
        [US + "::test_a_shuffle_from_the_global_rng_resumes_in_its_epochs_order", MORE_RE],
    ),
    "resume_redraws_worker_seeds": (
        "FAIL",
        [
            US + "::test_map_style_items_keep_their_values_after_a_resume[random_items-0-None]",
            US + "::test_map_style_items_keep_their_values_after_a_resume[random_items-2-9]",
            US + "::test_a_samplers_own_state_is_resumed",
            MORE_RE,
        ],
    ),
    "resume_skips_without_fetching": (
        "FAIL",
        [US + "::test_map_style_items_keep_their_values_after_a_resume[map_state-2-None]", MORE_RE],
    ),
    "resume_unordered_by_count": (
        "FAIL",
        [HO + "::test_a_state_after_reordered_batches_resumes_what_was_not_handed_out"],
    ),
    "resume_live_state": ("FAIL", [C + "test_snapshot_is_immutable.py"]),
    "resume_ignores_late_load": ("FAIL", [C + "test_load_is_never_ignored.py"]),
    "resume_sticky_skip": ("FAIL", [C + "test_resume_advances.py"]),
    "resume_asserts_topology": ("NON-STRICT", [C + "test_resume_topology_explicit.py"]),
    # issue 35: the spec's three new checkpoint properties
    "resume_state_dict_commits": ("FAIL", [C + "test_checkpoint_is_received.py"]),
    "resume_waits_for_skipped": ("FAIL", [C + "test_resume_never_stalls.py"]),
    "resume_refuses_map_topology": ("NON-STRICT", [C + "test_map_resume_any_workers.py"]),
    "threads_untagged_epochs": (
        "FAIL",
        [NSTALE + "::test_abandoned_epoch_leaves_nothing_stale_for_the_next"],
    ),
    "threads_join_exhausted": (
        "NON-STRICT",
        [IT + "::test_iterable_epoch_ends_promptly_after_its_last_item"],
    ),
    "pipes_waits_for_blocked_writers": (
        "NON-STRICT",
        [SC + "::test_dropping_an_iterator_with_large_results_in_flight_is_prompt"],
    ),
    "pipes_ignores_done_event": ("NON-STRICT", [NFAD]),
    "dispatches_after_end": ("FAIL", [C + "test_no_dispatch_after_end.py"]),
    "keeps_workers_after_error": ("NON-STRICT", [C + "test_fatal_error_shuts_down.py"]),
    "pipes_never_reaps": (
        "FAIL",
        [
            SC + "::test_leaving_an_epoch_early_stops_every_worker",
            PE + "::test_abandoned_iterable_epoch_leaves_the_next_whole",
        ],
    ),
    "pipes_no_watchdog": (
        "FAIL",
        [
            NOW + "::test_workers_exit_after_the_loader_process_is_sigkilled[busy]",
            NOW + "::test_busy_iterable_workers_exit_after_the_loader_process_is_sigkilled",
        ],
    ),
    "pipes_joins_forever": (
        "FAIL",
        [
            SC + "::test_stuck_worker_is_terminated_at_shutdown",
            SC + "::test_stuck_worker_with_the_pin_thread_is_terminated_at_shutdown",
        ],
    ),
    "epoch_timeout": (
        "FAIL",
        [
            IT + "::test_timeout_bounds_each_next_not_the_epoch",
            TPN + "::test_timeout_does_not_count_the_users_time_between_batches",
        ],
    ),
    "keeps_going_after_timeout": (
        "NON-STRICT",
        [C + "test_fail_stop_after_fatal_error.py::test_nothing_is_handed_out_after_a_timeout"],
    ),
    "reads_window_ahead": (
        "NON-STRICT",
        [PFH + "::test_first_batch_does_not_wait_for_a_slow_worker"],
    ),
    "leaks_threads_and_fds": (
        "FAIL",
        [
            SC + "::test_fd_count_stays_flat_across_persistent_pinned_loaders",
            PE + "::test_abandoned_iterable_epoch_leaves_the_next_whole",
        ],
    ),
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
            FR,
        ],
    ),
    "hangs_after_worker_death": (
        "FAIL",
        [
            FS + "::test_next_after_worker_death_raises_promptly",
            FS + "::test_next_after_idle_worker_death_does_not_hang",
        ],
    ),
    "ignores_prefetch_bound": ("FAIL", [C + "test_prefetch_bound.py"]),
    "hangs_at_iter": (
        "FAIL",
        [
            IT + "::test_iterable_epoch_ends_promptly_after_its_last_item",
            TPN + "::test_timeout_does_not_count_the_users_time_between_batches",
        ],
    ),
    "leaks_workers": (
        "FAIL",
        [
            SC + "::test_leaving_an_epoch_early_stops_every_worker",
            SC + "::test_dropping_a_persistent_loader_stops_its_workers",
            SC + "::test_stuck_worker_is_terminated_at_shutdown",
            SC + "::test_timeout_then_drop_leaves_no_hung_worker",
        ],
    ),
    "stale_epoch": ("FAIL", [NSTALE]),
    "restarts_after_stop": (
        "FAIL",
        [
            NDAS + "::test_exhausted_iterator_keeps_raising_stopiteration",
            NDAS + "::test_exhausted_iterable_shards_keep_raising_stopiteration",
        ],
    ),
    "never_pins": ("NON-STRICT", [C + "test_pin_thread_exits_first.py"]),
    "reseeds_workers": (
        "FAIL",
        [C + "test_type_ok.py::test_worker_info_and_seeds_are_per_worker_and_per_epoch"],
    ),
    "ignores_worker_init_fn": (
        "FAIL",
        [C + "test_type_ok.py::test_worker_init_fn_runs_before_the_worker_fetches", DRAWN],
    ),
    "survives_parent": ("FAIL", [NOW]),
    "keeps_exhausted_worker": (
        "FAIL",
        [
            C + "test_no_deadlock.py::test_uneven_iterable_shards_are_all_drained[True]",
            C + "test_no_deadlock.py::test_uneven_iterable_shards_are_all_drained[False]",
            NOT + "::test_a_slow_iterable_worker_is_not_overtaken",
        ],
    ),
    "slow_death_report": (
        "NON-STRICT",
        [PFH + "::test_death_is_reported_promptly_while_next_waits"],
    ),
    "leaks_shared_batches": (
        "FAIL",
        [SC + "::test_worker_killed_holding_a_shared_batch_leaves_nothing"],
    ),
    "collates_unbatched": (
        "FAIL",
        [DRAWN, MORE_DRAWN, DIB + "::test_unbatched_items_are_converted_not_collated"],
    ),
    "slips_batch_sampler": (
        "FAIL",
        [DRAWN, MORE_DRAWN, DIB + "::test_custom_batch_sampler_batches_are_handed_out_as_given"],
    ),
    # issue 36: ignoring the user's generator breaks a MUST (OrderFromUserGenerator); another
    # permutation drawn from it only a drop-in's SHOULD (torch's order for the seed)
    "ignores_generator": ("FAIL", [OFUG]),
    "shuffles_its_own_way": (
        "NON-STRICT",
        [DRAWN, MORE_DRAWN, DIB + "::test_seeded_shuffle_gives_torchs_order"],
    ),
    "resumes_abandoned_iterable": (
        "FAIL",
        [DRAWN, MORE_DRAWN, PE + "::test_abandoned_iterable_epoch_leaves_the_next_whole"],
    ),
    "hangs_on_idle_death": (
        "FAIL",
        [
            PE + "::test_death_between_persistent_epochs_is_reported_by_the_next",
            PE + "::test_death_after_an_abandoned_iterable_epoch_is_reported",
            C + "test_no_silent_loss.py::test_drawn_fault_schedules_keep_every_must",
        ],
    ),
    "skips_a_late_batch": ("FAIL", [NOT]),
    "pipes_feeder_blocks_exit": (
        "FAIL",
        [NOW + "::test_workers_exit_after_the_loader_process_is_sigkilled[blocked]", ORQ],
    ),
}

RUN_TIMEOUT_S = 420.0
# A test that waits on the runs may wait as long as the longest of them (the reference's sandbox:
# 500 s and a 60 s deadline): pytest-timeout's 300 s ended the first one at load 20-24.
RUNS_WAIT_S = 600
GROUPS = 5

# Correct loaders of other designs (tests/conformance/correct): the FAILs each may get, as
# (case file or file::function, the start of the failure): a real limit of its design, named in
# docs/conformance.md ("Limits of multiprocessing.Pool"). Pool: a worker SIGKILLed while it writes
# a result may leave a torn message that blocks the pool's result thread for good, and then a
# pool that cannot be shut down (racy; the queue locks a killed worker holds are released).
POOL_KILLS = [
    WD,
    C + "test_fail_stop_after_fatal_error.py",
    C + "test_no_silent_loss.py",
    PFH + "::test_death_is_reported_promptly_while_next_waits",
    PE + "::test_death_between_persistent_epochs_is_reported_by_the_next",
]
# Pool: dropped while a worker is blocked writing a result bigger than the pipe, which holds the
# result queue's write lock, `Pool.terminate()` may block on that lock (racy: seen once in a
# fresh-clone test run); the loader bounds it (5 s), the driver then waits 15 s for the workers
# to go, and the scenario's 20 s deadline ends it first.
POOL_BLOCKED_WRITER = SC + "::test_dropping_an_iterator_with_large_results_in_flight_is_prompt"
CORRECT: dict[str, list[tuple[str, str]]] = {
    "correct.executors:Loader": [],
    "correct.threads:Loader": [],
    "correct.pipes:Loader": [],
    "correct.pool:Loader": [
        *((sel, "ShutdownCompletes (MUST)") for sel in POOL_KILLS),
        (POOL_BLOCKED_WRITER, "ShutdownCompletes (MUST)"),
        (POOL_BLOCKED_WRITER, "IterationTerminates (MUST)"),
    ],
}
# The correct loaders are graded on the quick selection in the test command and on the whole
# suite in the nightly tier: with three whole-suite runs here CI took 868 s of its 900
# (docs/conformance.md, "Runtime"), and the quick selection is chosen to catch what the whole
# suite catches (test_the_quick_selection_grades_every_broken_loader_but_the_named).
QUICK_CASES_MIN = 40  # the quick selection's cases (66 now): a run that collected them all
# The SKIPs each correct design may get, by the start of their reason: nothing to checkpoint
# (no state_dict()); no process to kill (threads); a configuration the loader refuses with
# NotImplementedError (Pool: an IterableDataset; pipes: the spawn and forkserver contexts).
REFUSED = "the loader refused the configuration"
DECLARED_SKIPS: dict[str, tuple[str, ...]] = {
    "correct.executors:Loader": (NO_STATE,),
    "correct.threads:Loader": (NO_STATE, "not applicable to thread workers"),
    "correct.pipes:Loader": (NO_STATE, REFUSED),
    "correct.pool:Loader": (NO_STATE, REFUSED),
}
# A loader that leaks a thread and two fds at every shutdown: a run still ends within its limit
# (issue 12: the whole suite under 5 minutes on 2 cores; the quick selection, in the test command,
# took 142 s at load 7 beside four other runs).
LEAKY = "broken.leaks_threads_and_fds:Loader"
LEAKY_LIMIT_S = {"whole": 300.0, "quick": 300.0}
# Broken loaders whose cases mostly wait out a 15-30 s bound (leak grace, scenario deadline, orphan
# watch): spread over the groups first, so they wait side by side.
WAITS = {
    "hangs_at_iter",
    "leaks_workers",
    "survives_parent",
    "keeps_exhausted_worker",
    "hangs_after_worker_death",
    "no_timeout",
    "swallows_errors",
    "pipes_joins_forever",
    "pipes_no_watchdog",
    "pipes_waits_for_blocked_writers",
    "leaks_threads_and_fds",
    "hangs_on_idle_death",
    "pipes_feeder_blocks_exit",
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


@functools.cache
def _collect(*args: str) -> list[str]:
    """The node ids of the suite's cases (`args`: more pytest options, e.g. `-m quick`)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "conformance",
            "--co",
            "-q",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return [line.strip() for line in out.splitlines() if "::" in line]


def _reference_run(report: Path) -> Any:
    return run_whole_suite(report, 500)


def _timed_suite(loader: str, report: Path, timeout_s: float, *extra: str) -> tuple[float, Any]:
    start = time.monotonic()
    result = run_suite(["conformance"], loader, report, timeout_s, *extra)
    return time.monotonic() - start, result


def _selected(request: pytest.FixtureRequest, test: str) -> list[pytest.Item]:
    return [i for i in request.session.items if i.originalname == test]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Start the runs this session needs, all at once: the broken loaders it selected, packed
    into a few pytest runs (plan_groups), and the whole-suite runs of the reference, of the
    correct loaders and of the leaky one."""
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
    pool = concurrent.futures.ThreadPoolExecutor(len(groups) + 2 * len(CORRECT) + 2)
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
    designs = _selected(request, "test_correct_loader_of_another_design_gets_no_false_fail")
    for loader in {i.callspec.params["loader"] for i in designs}:
        report = tmp_path_factory.mktemp("design") / "report"
        futures[loader] = pool.submit(_timed_suite, loader, report, RUN_TIMEOUT_S)
    quick = _selected(request, "test_correct_loader_passes_the_quick_selection")
    for loader in {i.callspec.params["loader"] for i in quick}:
        report = tmp_path_factory.mktemp("quick") / "report"
        args = (loader, report, RUN_TIMEOUT_S, "-m", "quick")
        futures[("quick", loader)] = pool.submit(_timed_suite, *args)
    leaky = _selected(request, "test_a_loader_leaking_at_every_shutdown_is_graded_in_minutes")
    for selection in {i.callspec.params["selection"] for i in leaky}:
        report = tmp_path_factory.mktemp(f"leaky-{selection}") / "report"
        only = ("-m", "quick") if selection == "quick" else ()
        args = (LEAKY, report, LEAKY_LIMIT_S[selection], *only)
        futures[(selection, LEAKY)] = pool.submit(_timed_suite, *args)
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def test_every_case_has_a_broken_loader_that_catches_it() -> None:
    cases = _collect()
    assert cases, "no conformance cases collected"
    uncovered = [
        c for c in cases if not any(_matches(c, s) for _, sels in BROKEN.values() for s in sels)
    ]
    assert uncovered == [], f"cases no broken loader is shown to fail: {uncovered}"


# Broken loaders the quick selection (`-m quick`) does not grade as they are graded in the whole
# suite, and why (issue 25: the quick selection is chosen to catch what the whole suite catches).
QUICK_MISSES = {
    "breaks_under_spawn": "only a spawn or forkserver start shows it: 11-12 s each on the"
    " reference, a fifth of the quick selection's 60 s",
    "never_pins": "only the pin-memory case grades it (NON-STRICT, a SHOULD): 9 s on the reference",
}
# Broken loaders shown failing one case function only: each caught by one shape of scenario so
# far (it may fail others, not shown). Issue 25's single points of detection are off this list.
SINGLE_POINTS = {
    "breaks_under_spawn",
    "threads_untagged_epochs",
    "threads_join_exhausted",
    "pipes_waits_for_blocked_writers",
    "keeps_going_after_timeout",
    "reads_window_ahead",
    "never_pins",
    "reseeds_workers",
    "slow_death_report",
    "leaks_shared_batches",
    "ranks_hides_worker_info",
    "ranks_unpadded_split",
    "ranks_forgets_set_epoch",
    "resume_replays_finished_epoch",
    "resume_forgets_unstarted_order",
    "resume_unordered_by_count",
}


def _functions(cases: list[str], selectors: list[str]) -> set[str]:
    return {c.split("[")[0] for c in cases if any(_matches(c, s) for s in selectors)}


def test_the_quick_selection_grades_every_broken_loader_but_the_named() -> None:
    """Each broken loader gets its whole-suite grade from a case of the quick selection (a
    selector of BROKEN, each shown by test_broken_loader_fails_its_cases), but QUICK_MISSES."""
    quick = _collect("-m", "quick")
    caught = {name for name, (_, sels) in BROKEN.items() if _functions(quick, sels)}
    print(
        f"\n{len(caught)} of {len(BROKEN)} broken loaders graded in the quick selection"
        f" ({len(quick)} cases); not: {sorted(set(BROKEN) - caught)}"
    )
    assert set(BROKEN) - caught == set(QUICK_MISSES)


def test_every_broken_loader_is_caught_by_two_cases_but_the_named() -> None:
    """No single point of detection: each broken loader fails (or is graded NON-STRICT by) at
    least two case functions, but the SINGLE_POINTS named so far."""
    cases = _collect()
    single = {name for name, (_, sels) in BROKEN.items() if len(_functions(cases, sels)) < 2}
    print(f"\n{len(BROKEN) - len(single)} of {len(BROKEN)} broken loaders caught by 2+ cases")
    assert single == SINGLE_POINTS


def test_every_broken_loader_module_is_used() -> None:
    modules = {p.stem for p in (Path(__file__).parent / "broken").glob("*.py")}
    assert modules - {"__init__", "_wrap", "_stateful", "dispatch"} == set(BROKEN)


@pytest.mark.slow
@pytest.mark.timeout(RUNS_WAIT_S)
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
@pytest.mark.timeout(RUNS_WAIT_S)
def test_whole_suite_on_the_reference_passes_and_leaves_nothing(runs: dict[str, Any]) -> None:
    """No FAIL; no process or zombie left (the run's orphans are re-parented to the sandbox
    child, a subreaper, so none can hide under init); no /dev/shm entry named with a pid of the
    run (other programs' segments are not the suite's); and every run of every case, traced,
    is a behaviour of the spec (trace-check ACCEPTED, run by run)."""
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
    traces = json.loads((report / "traces" / "traces.json").read_text())
    print(
        f"\n{traces['accepted']}/{traces['runs']} traced runs of {traces['cases']} cases"
        f" ACCEPTED ({traces['seconds']} s of trace-check)"
    )
    bad = [b["why"] for b in traces["rejected"] + traces["unreadable"]]
    assert bad == [], "traces of the reference not accepted:\n" + "\n\n".join(bad[:3])
    assert traces["runs"] >= traces["cases"] > 40, traces
    assert info["rc"] == 0, info["tail"]


def _a_named_limit(loader: str, case: dict[str, Any]) -> bool:
    return any(
        _matches(case["nodeid"], sel) and case["detail"].startswith(why)
        for sel, why in CORRECT[loader]
    )


def _false_fails(loader: str, results: dict[str, Any]) -> dict[str, str]:
    """The FAILs of `loader`'s run that none of its design's named limits allows."""
    return {
        c["nodeid"]: c["detail"][:200]
        for c in results["cases"]
        if c["outcome"] == "FAIL" and not _a_named_limit(loader, c)
    }


def _undeclared_skips(loader: str, results: dict[str, Any]) -> list[str]:
    """The SKIPs of `loader`'s run whose reason its design did not declare (DECLARED_SKIPS)."""
    return [
        f"{c['nodeid']}: {c['detail'][:200]}"
        for c in results["cases"]
        if c["outcome"] == "SKIP" and not any(why in c["detail"] for why in DECLARED_SKIPS[loader])
    ]


@pytest.mark.slow
@pytest.mark.nightly
@pytest.mark.timeout(RUNS_WAIT_S)
@pytest.mark.parametrize("loader", sorted(CORRECT))
def test_correct_loader_of_another_design_gets_no_false_fail(
    runs: dict[str, Any], loader: str
) -> None:
    """The whole suite against a correct loader of another design: no FAIL but the ones its
    design's named limits allow; every SKIP one its design declared (thread workers SKIP the
    kill cases with the reason)."""
    took, (code, out, results) = runs[loader].result()
    assert results is not None, f"no report.json (exit {code}):\n{out[-3000:]}"
    assert _false_fails(loader, results) == {}, f"{loader} ({took:.0f} s):\n{out[-3000:]}"
    assert len(results["cases"]) > 60
    assert _undeclared_skips(loader, results) == []


@pytest.mark.slow
@pytest.mark.timeout(RUNS_WAIT_S)
@pytest.mark.parametrize("loader", sorted(CORRECT))
def test_correct_loader_passes_the_quick_selection(runs: dict[str, Any], loader: str) -> None:
    """The quick selection against a correct loader (its whole suite runs nightly): no FAIL but
    its named limits, and every SKIP one its design declared."""
    took, (code, out, results) = runs[("quick", loader)].result()
    assert results is not None, f"no report.json (exit {code}):\n{out[-3000:]}"
    assert _false_fails(loader, results) == {}, f"{loader} ({took:.0f} s):\n{out[-3000:]}"
    assert len(results["cases"]) > QUICK_CASES_MIN
    assert _undeclared_skips(loader, results) == []


@pytest.mark.slow
@pytest.mark.timeout(RUNS_WAIT_S)
@pytest.mark.parametrize("selection", ["quick", pytest.param("whole", marks=pytest.mark.nightly)])
def test_a_loader_leaking_at_every_shutdown_is_graded_in_minutes(
    runs: dict[str, Any], selection: str
) -> None:
    """A loader that leaves a thread and two fds behind at every shutdown: the run (the quick
    selection in the test command, the whole suite nightly) ends within LEAKY_LIMIT_S (it is
    killed past it, and then has no complete report), and the cases that look at what is left
    FAIL naming the leak."""
    took, (code, out, results) = runs[(selection, LEAKY)].result()
    assert results is not None, f"no report after {took:.0f} s (exit {code}):\n{out[-3000:]}"
    assert results["complete"], f"stopped at {took:.0f} s:\n{out[-3000:]}"
    leaks = [
        c for c in results["cases"] if c["outcome"] == "FAIL" and "leaked-reader" in c["detail"]
    ]
    assert len(leaks) > 20, out[-3000:]
    # Each such FAIL is counted under the property whose check failed, whatever the case's
    # markers (NoStaleEpochDelivery's cases check what is left too).
    assert {p for c in leaks for p in c["failed_properties"]} == {"ShutdownCompletes"}
    by_property = {
        p["property"]: p["by_loader"][LEAKY] for p in matrix({LEAKY: results})["properties"]
    }
    assert by_property["ShutdownCompletes"]["FAIL"] >= len(leaks)
