"""bench: the quick run prints every row; the pieces it is built from behave."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench import faults, resume, spec, stages, throughput
from bench.__main__ import main as bench_main
from bench.rows import Row, na, render

ROOT = Path(__file__).resolve().parents[2]
# torch beside the reference, so the ratio rows have both sides; torchdata (optional) is left
# out of the smoke run to keep it inside the CI budget: its rows are the same code.
LOADERS = ("torch", "reference")
FAULTS = (
    "worker death -> error",
    "later next() after the error",
    "orphan exit after parent SIGKILL, idle",
    "orphan exit after parent SIGKILL, busy in __getitem__",
    "orphan exit after parent SIGKILL, blocked on a full pipe",
    "shutdown (del it, loader) with a stuck worker",
)


WORKS = throughput.workloads(quick=True)
PEER_RANKED = ("cheap", "1MB items")  # the workloads whose targets name the best peer


def expected_rows(loaders: tuple[str, ...]) -> list[str]:
    """Every row the benchmark must print for ``loaders``, measured or not."""
    others = [name for name in loaders if name != "torch"]
    return (
        [
            f"transport {batch}: {method}"
            for batch in ("cheap 4x64 f32", "large 4x1MB f32")
            for method in ("reference", "reference-bytes", "torch", "pickle", "torch / reference")
        ]
        + [
            f"stages {loader}: {figure}"
            for loader in stages.LOADERS_MEASURED
            if loader in loaders
            for figure in (*stages.STAGES, *stages.MEASURED)
        ]
        + [f"{w.label}: {loader}" for w in WORKS for loader in loaders]
        + [
            name
            for w in WORKS
            for name in [
                *(f"ratio {loader}/torch, {w.name}" for loader in others),
                *([f"ratio reference/best peer, {w.name}"] if w.name in PEER_RANKED else []),
                # the CPU targets (cheap items) and the CPU-bound ceiling (costly items)
                *(
                    [
                        f"ratio reference/best peer, CPU per batch, {w.name}",
                        f"CPU per batch, main process, {w.name}: reference",
                    ]
                    if w.name == "cheap"
                    else []
                ),
                *(
                    [f"share of the CPUs' ceiling, {w.name}: reference"]
                    if w.name == "costly"
                    else []
                ),
            ]
        ]
        + [f"{fault} ({loader})" for fault in FAULTS for loader in loaders]
        + [f"ratio torch/{loader}, {fault}" for fault in FAULTS for loader in others]
        + [
            f"MCQuickMap, {constant} = {value}: distinct states"
            for constant, values in spec.sweeps(quick=True).items()
            for value in values
        ]
        + resume_rows(loaders)
    )


def resume_rows(loaders: tuple[str, ...]) -> list[str]:
    """The resume section's rows: the loaders that checkpoint (torch's has no state_dict())."""
    names = []
    for loader in (name for name in resume.RESUME_LOADERS if name in loaders):
        names.append(f"cheap items, state_dict() after every batch / never: {loader}")
        names.append(f"state_dict() time per cheap batch: {loader}")
        names += [
            f"state_dict() latency, {n:,} items, {w} worker{'s' * (w > 1)}: {loader}"
            for n in resume.SIZES
            for w in resume.WORKERS
        ]
        names += [
            f"first batch after load_state_dict(), {n:,} items: {loader}" for n in resume.SIZES
        ]
        names += [f"state size, {n:,} items: {loader}" for n in resume.SIZES]
    if "reference" in loaders and "torchdata" in loaders:
        names.append("ratio reference/torchdata, cheap items with state_dict() after every batch")
    return names


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_run_prints_every_row(tmp_path):
    out = tmp_path / "bench.json"
    folder = tmp_path / "results"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    loader_args = [arg for name in LOADERS for arg in ("--loader", name)]
    command = [
        *(sys.executable, "-m", "bench", "--quick", "--deadline", "2"),
        *("--json", str(out), "--out", str(folder)),
    ]
    proc = subprocess.run(
        [*command, *loader_args],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    names = [row["name"] for row in doc["rows"]]
    assert sorted(names) == sorted(expected_rows(LOADERS))
    for row in doc["rows"]:
        # A figure, or the reason there is none: never an empty row.
        assert row["value"] is not None or row["note"], row
        assert row["name"] in proc.stdout
    # The reference's figures exist (no timing asserted: speed is the bench's, not a test's;
    # the 2 s deadline is only a hang bound, 4x the 0.5 s targets, for loaded CI cores).
    by_name = {row["name"]: row for row in doc["rows"]}
    for name in (
        "cheap items (64 floats, batch 4, 2 workers): reference",
        "worker death -> error (reference)",
        "shutdown (del it, loader) with a stuck worker (reference)",
        "cheap items, state_dict() after every batch / never: reference",
        "state size, 1,000,000 items: reference",
    ):
        assert by_name[name]["value"] is not None, by_name[name]
    assert doc["meta"]["mode"] == "quick"
    assert doc["meta"]["window_s"] == throughput.WINDOW_S[True]
    assert set(doc["meta"]["loaders"]) == set(LOADERS)
    # The results folder: the page names every loader and has a table per section; plots when
    # matplotlib (the bench extra) is installed, else the page says why there are none.
    page = (folder / "results.md").read_text()
    assert f"(1 repeat per loader, each rate over {throughput.WINDOW_S[True]:g} s)" in page
    headings = ("## Targets", "## Throughput", "## Where a cheap batch", "## Faults", "## Spec")
    for heading in (*headings, "## Resume", "## Plots"):
        assert heading in page
    assert json.loads((folder / "results.json").read_text())["throughput"]["cheap"]["reference"]
    pngs = sorted(p.name for p in folder.glob("*.png"))
    if pngs:
        assert "throughput_size.png" in pngs
        assert "faults.png" in pngs
    else:
        assert "No plots: matplotlib is not installed" in page
    # The bench cleans up by PID: nothing it started outlives it.
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_a_longer_window_gets_epochs_that_outlast_it(capsys):
    """``--window S``: every epoch's cap grows with the window (an epoch that ended inside it
    would be measured short), never shrinks below the default's; a window that is not a
    positive number of seconds is one argparse error naming the fix."""
    default = {w.name: w.batches for w in throughput.workloads(quick=False)}
    longer = {w.name: w.batches for w in throughput.workloads(quick=False, window_s=8.0)}
    shorter = {w.name: w.batches for w in throughput.workloads(quick=False, window_s=0.5)}
    assert longer == {name: 4 * n for name, n in default.items()}
    assert shorter == default
    for bad in ("0", "-1", "inf", "eight"):
        with pytest.raises(SystemExit):
            bench_main(["--only", "throughput", "--window", bad])
        assert f"{bad!r} is not a positive number of seconds, e.g. 8" in capsys.readouterr().err


def test_rows_render_values_and_reasons():
    rows = [
        Row("a", "x", 1234.5, "ms", "note"),
        Row("a", "yy", None, "s", "n/a: no loader"),
        Row("b", "z", 0.125, "x"),
    ]
    text = render(rows)
    assert "== a ==" in text
    assert "== b ==" in text
    assert "1,234 ms  (note)" in text or "1,235 ms  (note)" in text
    assert "n/a: no loader" in text
    assert "0.125 x" in text


def test_na_names_the_exception():
    assert na(ImportError("no module named torchdata\nmore")) == (
        "n/a: ImportError: no module named torchdata"
    )
    assert na("because") == "n/a: because"


def test_fault_ratio_is_a_lower_bound_when_torch_hit_the_deadline():
    mine = Row("faults", "x (reference)", 0.1, "s")
    hung = Row("faults", "x (torch)", None, "s", "> 10 s: ...", bound=10.0)
    row = faults.ratio("x", "s", mine, hung, "reference")
    assert row.value is None
    assert row.bound == pytest.approx(100.0)
    assert row.note.startswith("> 100 x")
    measured = Row("faults", "x (torch)", 5.0, "s")
    assert faults.ratio("x", "s", mine, measured, "reference").value == pytest.approx(50.0)
    missing = Row("faults", "x (reference)", None, "s", "n/a: broken")
    assert faults.ratio("x", "s", missing, measured, "reference").value is None


def test_targets_are_judged_for_the_reference_only():
    assert faults._target_note("reference", 0.03, 0.5, "s") == "target <= 0.5 s: met"
    assert faults._target_note("reference", 0.7, 0.5, "s") == "target <= 0.5 s: missed"
    assert faults._target_note("reference", None, 0.5, "s") == "target <= 0.5 s: missed"
    assert faults._target_note("torch", 0.7, 0.5, "s") == ""


def test_spec_variant_changes_one_constant():
    text = "CONSTANTS\n    NumWorkers = 2\n    NumTasks = 3\n"
    changed = spec._variant(text, "NumWorkers", 3)
    assert changed == "CONSTANTS\n    NumWorkers = 3\n    NumTasks = 3\n"
    with pytest.raises(ValueError):
        spec._variant(text, "PrefetchFactor", 1)


def _fake_run(rate: float) -> dict:
    figures = {
        "batches": 10,
        "batches_per_s": rate,
        "first_batch_s": 0.1,
        "main_cpu_per_batch_s": 1e-4,
        "workers_cpu_per_batch_s": 2e-4,
        "peak_rss_bytes": 2**20,
        "peak_fds": 9,
        "peak_threads": 2,
        "peak_processes": 2,
        "children_left": 0,
        "fds_left": 0,
    }
    return {**{w.name: dict(figures) for w in WORKS}, "left": ""}


def test_results_folder_from_figures(tmp_path):
    """Ratios to torch, the rank against the best peer and the page, from made-up runs."""
    names = {"torch": None, "reference": None, "nodes-thread": None, "grain": "ImportError: x"}
    runs = {"torch": [_fake_run(100.0)], "reference": [_fake_run(1100.0)]}
    runs["nodes-thread"] = [_fake_run(500.0)]
    summary = throughput.summarize(WORKS, runs)
    rows = throughput.rows(WORKS, summary, names)
    by_name = {r.name: r for r in rows}
    assert by_name["ratio reference/torch, cheap"].value == pytest.approx(11.0)
    assert "target >= 10x: met" in by_name["ratio reference/torch, cheap"].note
    rank = by_name["ratio reference/best peer, cheap"]
    assert rank.value == pytest.approx(2.2)
    assert "best peer nodes-thread" in rank.note
    assert by_name[f"{WORKS[0].label}: grain"].note == "n/a: ImportError: x"
    meta = {
        "date": "d",
        "platform": "p",
        "cpus": 2,
        "python": "3",
        "torch": "t",
        "mode": "quick",
        "repeats": 5,
        "window_s": 8.0,
        "loadavg_at_start": (1.0, 1.0, 1.0),
        "loaders": {n: why or "available" for n, why in names.items()},
    }
    from bench import results

    written = results.write(tmp_path, rows, meta, WORKS, summary)
    page = (tmp_path / "results.md").read_text()
    assert "(5 repeats per loader, each rate over 8 s)" in page
    row = "| cheap items (64 floats, batch 4, 2 workers) | 100 | 1,100 (11.00x) | 500 (5.00x) |"
    assert row in page
    assert all(p.exists() for p in written)


def test_a_cpu_bound_ratio_says_what_the_cpus_allow():
    """On a workload of fixed CPU work per item, the reference's ratio to torch also says the
    most the machine's CPUs allow: workers (at most one per CPU) doing nothing but the work."""
    costly = next(w for w in throughput.workloads(quick=False) if w.name == "costly")
    bound = throughput.cpu_bound(costly)
    cpus = min(costly.num_workers, len(os.sched_getaffinity(0)))
    assert bound == pytest.approx(cpus / (costly.batch_size * costly.cost_s))
    runs = {"torch": [_fake_run(bound / 2)], "reference": [_fake_run(bound * 0.9)]}
    summary = throughput.summarize([costly], runs)
    rows = throughput.rows([costly], summary, {"torch": None, "reference": None})
    note = next(r.note for r in rows if r.name == "ratio reference/torch, costly")
    assert (
        f"these CPUs allow at most 2.00x torch ({bound:,.0f}/s), reference makes 90% of that"
        in note
    )
    assert throughput.cpu_bound(WORKS[0]) is None  # cheap items: no fixed work per item


def _runs(rates: list[float]) -> list[dict]:
    return [_fake_run(rate) for rate in rates]


def test_ratios_are_paired_repeat_by_repeat_with_a_verdict_from_their_range():
    """A ratio is the median of per-repeat ratios (repeat i of one loader over repeat i of the
    other), with their range; "ahead"/"behind" only when the whole range is past 1."""
    cheap = [WORKS[0]]
    names = {"torch": None, "reference": None, "nodes-thread": None}
    # The machine slows down over the run: rates fall, but each pair keeps its ratio.
    runs = {
        "torch": _runs([100.0, 80.0, 60.0, 50.0, 40.0]),
        "reference": _runs([1300.0, 1000.0, 800.0, 640.0, 520.0]),
        "nodes-thread": _runs([1000.0, 800.0, 600.0, 500.0, 400.0]),
    }
    summary = throughput.summarize(cheap, runs)
    by_name = {r.name: r for r in throughput.rows(cheap, summary, names)}
    rank = by_name["ratio reference/best peer, cheap"]
    # Paired: 1.3, 1.25, 1.33, 1.28, 1.3 -> median 1.3, range 1.25-1.33; unpaired medians would
    # give the same here, but their min-max would span 0.52-1.3 and say nothing.
    assert rank.value == pytest.approx(1.3)
    assert rank.note.startswith("ahead of the best peer nodes-thread")
    assert "range 1.25-1.33" in rank.note
    assert "over 5 paired repeats (94% interval)" in rank.note
    level = throughput.Interval(1.01, 0.97, 1.05, 5)
    assert level.verdict == "level"
    assert throughput.Interval(0.9, 0.85, 0.95, 5).verdict == "behind"
    assert throughput.Interval(1.2, 1.2, 1.2, 1).verdict.startswith("unresolved")


def test_a_target_is_met_only_when_the_whole_range_clears_it():
    cheap = [WORKS[0]]
    runs = {"torch": _runs([100.0, 100.0, 100.0]), "reference": _runs([1100.0, 1050.0, 950.0])}
    summary = throughput.summarize(cheap, runs)
    rows = throughput.rows(cheap, summary, {"torch": None, "reference": None})
    ratio = next(r for r in rows if r.name == "ratio reference/torch, cheap")
    assert ratio.value == pytest.approx(10.5)  # the median clears 10x, the range does not
    assert "target >= 10x: missed" in ratio.note


def test_more_repeats_narrow_the_interval_by_order_statistics():
    """Up to 8 repeats the interval is the range; from 9 on it drops the extremes while it
    still holds the median with probability >= 15/16 (the 5 repeats' range)."""
    assert [throughput.order_k(n) for n in (2, 5, 8, 9, 12, 15)] == [1, 1, 1, 2, 3, 4]
    assert throughput.coverage(5, 1) == pytest.approx(1 - 2**-4)
    assert throughput.coverage(9, 2) == pytest.approx(1 - 2 * 10 / 2**9)
    found = throughput.Interval.of([1.0, 1.4, 1.2, 1.25, 1.3, 1.22, 1.28, 1.24, 2.0])
    assert found is not None
    assert (found.low, found.median, found.high) == (1.2, 1.25, 1.4)
    assert "(values 2-8 in order)" in found.text()
    assert "over 9 paired repeats (96% interval)" in found.text()
    assert found.verdict == "ahead"


def _cpu_run(rate: float, main_s: float, workers_s: float) -> dict:
    run = _fake_run(rate)
    for figures in run.values():
        if isinstance(figures, dict):
            figures.update(main_cpu_per_batch_s=main_s, workers_cpu_per_batch_s=workers_s)
    return run


def test_cpu_and_ceiling_targets_are_judged_on_their_intervals():
    """Main-process CPU per cheap batch <= 25 us, total CPU below the fastest peer's, and the
    costly workload's share of what the CPUs allow >= 95 %: each met only where the whole
    interval says so."""
    costly = next(w for w in WORKS if w.name == "costly")
    works = [WORKS[0], costly]
    bound = throughput.cpu_bound(costly)
    assert bound is not None
    names = {"torch": None, "reference": None, "nodes-thread": None}
    runs = {
        "torch": [_cpu_run(bound / 2, 300e-6, 400e-6) for _ in range(5)],
        "reference": [
            _cpu_run(bound * share, main, 60e-6)
            for share, main in [
                (0.97, 20e-6),
                (0.96, 24e-6),
                (0.98, 22e-6),
                (0.96, 23e-6),
                (0.94, 21e-6),
            ]
        ],
        "nodes-thread": [_cpu_run(bound * 0.5, 100e-6, 0.0) for _ in range(5)],
    }
    rows = {r.name: r for r in throughput.rows(works, throughput.summarize(works, runs), names)}
    main = rows["CPU per batch, main process, cheap: reference"]
    assert main.value == pytest.approx(22.0)
    assert main.note.endswith("target <= 25 us: met")
    versus = rows["ratio reference/best peer, CPU per batch, cheap"]
    assert "nodes-thread" in versus.note
    assert versus.note.endswith("target below the best peer's: met")  # 80-84 us against 100
    ceiling = rows["share of the CPUs' ceiling, costly: reference"]
    assert ceiling.value == pytest.approx(96.0)
    assert ceiling.note.endswith("target >= 95%: missed")  # the interval reaches down to 94 %


def test_the_noise_floor_is_the_reference_against_itself():
    cheap = [WORKS[0]]
    names = {"torch": None, "reference": None, throughput.NOISE_FLOOR: None}
    runs = {
        "torch": _runs([100.0, 100.0, 100.0]),
        "reference": _runs([700.0, 720.0, 690.0]),
        throughput.NOISE_FLOOR: _runs([710.0, 700.0, 700.0]),
    }
    summary = throughput.summarize(cheap, runs)
    rows = {r.name: r for r in throughput.rows(cheap, summary, names)}
    floor = rows[f"noise floor: {throughput.NOISE_FLOOR}/reference, cheap"]
    assert floor.note.endswith("the same loader twice: level")
    # The A/A column is never ranked as a peer.
    assert (
        "ratio reference/best peer, cheap" not in rows
        or "n/a" in rows["ratio reference/best peer, cheap"].note
    )


def _resume_run(never: float, every: float, size_small: int, size_large: int) -> dict:
    figures: dict = {"never": never, "every": every}
    for n in resume.SIZES:
        for w in resume.WORKERS:
            figures[f"latency {n} {w}"] = 1e-5
        size = size_small if n == resume.SIZES[0] else size_large
        figures[f"resume {n}"] = {"size_bytes": size, "first_batch_s": 0.2}
    return figures


def test_resume_rows_from_figures():
    """The every/never ratio and its 5 % target, the state's growth and the paired ratio to
    StatefulDataLoader, from made-up runs (the section's page code, no loader run)."""
    names = {"reference": None, "torchdata": None, "nodes-thread": "ImportError: x"}
    runs = {
        "reference": [_resume_run(1000.0, 970.0, 100, 100), _resume_run(900.0, 880.0, 100, 100)],
        "torchdata": [_resume_run(500.0, 200.0, 100, 900), _resume_run(400.0, 180.0, 100, 900)],
    }
    by_name = {r.name: r for r in resume.rows(names, runs)}
    every = by_name["cheap items, state_dict() after every batch / never: reference"]
    assert every.value == pytest.approx((0.97 + 880 / 900) / 2)
    assert "target >= 0.95x (costs <= 5 %): met" in every.note
    share = by_name["state_dict() time per cheap batch: reference"]
    assert share.value == pytest.approx((1e-5 * 1000 + 1e-5 * 900) * 100 / 2)  # 0.95 %
    assert "target <= 5 %: met" in share.note
    assert (
        "target"
        not in by_name["cheap items, state_dict() after every batch / never: torchdata"].note
    )
    assert "target no growth: met" in by_name["state size, 1,000,000 items: reference"].note
    assert "grows" in by_name["state size, 1,000,000 items: torchdata"].note
    latency = by_name["state_dict() latency, 1,000 items, 2 workers: reference"]
    assert latency.value == pytest.approx(10.0)  # microseconds
    versus = by_name["ratio reference/torchdata, cheap items with state_dict() after every batch"]
    assert versus.value == pytest.approx((970 / 200 + 880 / 180) / 2)
    assert "target ahead of StatefulDataLoader: met" in versus.note
    assert by_name["state size, 1,000 items: nodes-thread"].note == "n/a: ImportError: x"


def test_stages_other_is_measured_minus_the_stages_per_process():
    figures: dict[str, stages.StageFigure] = dict.fromkeys(stages.STAGES, "n/a: none here")
    figures["fetch (4 x __getitem__)"] = ("worker", 8.0, "made up")
    figures["serialize"] = ("worker", 2.0, "made up")
    figures["deserialize"] = ("main", 5.0, "made up")
    measured = {"main": 20.0, "workers": 30.0, "load": 1.5}
    rows = {
        r.name.split(": ", 1)[1]: r for r in stages._loader_rows("stages x", measured, figures, 10)
    }
    assert set(rows) == {*stages.STAGES, *stages.MEASURED}
    assert rows["collate"].value is None
    assert rows["collate"].note == "n/a: none here"
    assert rows["sum of the stages, workers"].value == 10.0
    assert rows["other, workers (measured - stages)"].value == 20.0
    assert rows["other, main (measured - stages)"].value == 15.0
    assert rows["measured, total"].value == 50.0
    assert "load 1.5" in rows["measured, main"].note
