"""Reference-loader runs, drawn by Hypothesis over configs and injected faults, are behaviours
of the spec: each run's trace is validated by TLC (``loaderspec.tracecheck``).

Hypothesis draws ``RUNS`` schedules, each played in faultinject's sandbox as it is drawn; then
all the traces are checked in a few TLC calls (runs with the same constants share one JVM),
which is what keeps this inside the CI budget. A rejected trace prints TLC's explanation with
the spec state (the run's folder name and schedule are in it). Configs come from a few
families so that the TLC calls stay few.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from loaderspec.faultinject.faults import Die, Hang, Raise, Sleep

from loaderspec import tracecheck
from loaderspec.replay import HANG_S, TIMEOUT_S, Schedule, play

RUNS = int(os.environ.get("LOADERSPEC_TRACE_RUNS", "100"))

# (name, fixed Schedule fields): each family is one set of spec constants (one TLC call).
FAMILIES: dict[str, dict] = {
    "map2": {"num_workers": 2, "num_items": 8, "batch_size": 1, "prefetch_factor": 2},
    "map2-bs2": {"num_workers": 2, "num_items": 8, "batch_size": 2, "prefetch_factor": 1},
    # map2-bs2's constants, 64 KiB items: every batch crosses in a worker's shared-memory slot
    # (reference/arena.py), its origin with it
    "map2-big": {
        "num_workers": 2,
        "num_items": 8,
        "batch_size": 2,
        "prefetch_factor": 1,
        "item_floats": 8192,
    },
    "map3-unordered": {
        "num_workers": 3,
        "num_items": 9,
        "batch_size": 1,
        "prefetch_factor": 1,
        "in_order": False,
    },
    "map1": {"num_workers": 1, "num_items": 5, "batch_size": 1, "prefetch_factor": 2},
    "persistent": {
        "num_workers": 2,
        "num_items": 6,
        "batch_size": 1,
        "prefetch_factor": 2,
        "persistent_workers": True,
    },
    "iterable": {"num_workers": 2, "prefetch_factor": 2},
    # pin_memory: a pin thread even without an accelerator (LOADERSPEC_FORCE_PIN_THREAD)
    "pin": {
        "num_workers": 2,
        "num_items": 6,
        "batch_size": 1,
        "prefetch_factor": 1,
        "pin_memory": True,
    },
}


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    family = draw(st.sampled_from(sorted(FAMILIES)))
    fields = dict(FAMILIES[family])
    if family == "iterable":
        fields["shard_lengths"] = tuple(draw(st.lists(st.integers(0, 4), min_size=2, max_size=2)))
        items = max(fields["shard_lengths"])
        epochs = 1
    else:
        items = fields["num_items"]
        epochs = draw(st.integers(1, 3)) if fields.get("persistent_workers") else 1
    fields["epochs"] = epochs
    at = draw(st.integers(0, max(0, items - 1)))
    fault = draw(
        st.sampled_from(
            ["none", "none", "raise", "die", "die-after", "drop", "kill-parent", "hang", "slow"]
        )
    )
    epoch_at = (draw(st.integers(0, epochs - 1)), draw(st.integers(0, items)))
    if fault == "raise":
        fields["faults"] = (Raise(at=at),)
    elif fault in ("die", "die-after"):
        point = "before_fetch" if fault == "die" else "after_fetch"
        fields["faults"] = (Die(at=at, point=point, once=True),)
    elif fault == "drop":
        fields["drop_at"] = epoch_at
    elif fault == "kill-parent":
        fields["kill_parent_at"] = epoch_at
        # from the main thread workers die by PDEATHSIG; from another, by their watchdog
        fields["in_thread"] = draw(st.booleans())
    elif fault == "hang":
        fields["faults"] = (Hang(at=at, seconds=HANG_S, once=True),)
        fields["timeout"] = TIMEOUT_S
    elif fault == "slow":  # slower than the timeout once: a timeout, then a late result
        fields["faults"] = (Sleep(at=at, seconds=TIMEOUT_S * 1.5, once=True),)
        fields["timeout"] = TIMEOUT_S
    return Schedule(name=f"{family}/{fault}", **fields)


@pytest.mark.slow
def test_reference_runs_are_behaviours_of_the_spec(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference-traces")
    replays: list = []

    # Hypothesis drives the runs (one example = one run, so draws are diverse); the traces
    # are validated afterwards, all together, in a few TLC calls.
    @settings(
        max_examples=RUNS,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(schedule=schedules())
    def play_one(schedule: Schedule) -> None:
        replay = play(schedule, trace_dir=root / f"run{len(replays):03d}", deadline_s=60)
        replays.append(replay)
        assert replay.outcome not in ("deadline", "raised"), f"{schedule}: {replay.error}"
        assert replay.clean, f"{schedule}: left behind {replay.leftovers}"

    started = time.monotonic()
    play_one()
    played = time.monotonic() - started
    assert len(replays) >= RUNS
    kinds = Counter(r.schedule.name for r in replays)
    runs = tracecheck.runs_of([r.trace_dir for r in replays])
    started = time.monotonic()
    verdicts = tracecheck.check_runs(runs)
    checked = time.monotonic() - started
    print(
        f"\n{len(runs)} traces of {len(replays)} reference runs ({len(kinds)} kinds of run):"
        f" played in {played:.1f} s, validated in {checked:.1f} s"
        f" ({checked / len(runs):.2f} s per trace)"
    )
    rejected = [v for v in verdicts if not v.ok]
    # The schedule that produced each rejected trace: enough to replay it by hand (play()).
    schedule_of = {str(r.trace_dir): r.schedule for r in replays}
    shown = [
        f"{tracecheck.localise(v).explain()}\n  schedule:"
        f" {schedule_of.get(v.run.name.split('#')[0])}"
        for v in rejected[:3]
    ]
    assert not rejected, f"{len(rejected)} of {len(runs)} traces rejected:\n" + "\n\n".join(shown)
