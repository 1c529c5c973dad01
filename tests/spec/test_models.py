"""The spec's models give their recorded results: the quick tier passes with its figures and
makes every action take a step, and every broken variant violates exactly the properties the
manifest lists for it (spec/models.toml), no more and no fewer.

The broken variants run two at a time (each TLC uses one worker thread) to keep CI in budget.
"""

from __future__ import annotations

import dataclasses
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from loaderspec import manifest, modelcheck, tlc, variantcheck
from loaderspec.tlavalues import as_function, parse
from loaderspec.vocabulary import (
    ALL_PROPERTIES,
    CHECKPOINT_MODULE,
    PROPERTIES,
    PROPERTY_NAMES,
    Action,
    Check,
    Level,
    module_properties,
    property_named,
)

MANIFEST = modelcheck.load_manifest()
QUICK = [m for m in MANIFEST if m.tier == "quick"]
BROKEN = [m for m in MANIFEST if m.tier == "broken"]
NIGHTLY = [m for m in MANIFEST if m.tier == "nightly"]
SPEC = modelcheck.spec_dir() / "DataLoader.tla"
CHECKPOINT_SPEC = modelcheck.spec_dir() / f"{CHECKPOINT_MODULE}.tla"


# The pairwise design below is DataLoader.tla's; the checkpoint module's nightly models are
# pairwise over its own factors (docs/checkpoint.md).
LOADER_NIGHTLY = [
    m for m in NIGHTLY if m.module == "DataLoader" and m.spec.name != manifest.INDUCTIVE_SPEC
]
TIMEOUT_S = 240.0


def _definitions(path: Path) -> set[str]:
    text = re.sub(r"\(\*.*?\*\)", "", path.read_text(), flags=re.S)
    return set(re.findall(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))


def _constants(cfg: Path) -> frozenset[str]:
    """The model a cfg defines: its constant values and hook substitutions, comments dropped."""
    lines = [" ".join(line.split("\\*")[0].split()) for line in cfg.read_text().splitlines()]
    start = lines.index("CONSTANTS") + 1
    end = next(i for i in range(start, len(lines)) if re.fullmatch(r"[A-Z_]+( .*)?", lines[i]))
    return frozenset(line for line in lines[start:end] if line)


def test_manifest_is_complete_and_points_at_real_files():
    assert {m.tier for m in MANIFEST} == {"quick", "nightly", "broken"}
    for model in MANIFEST:
        assert model.cfg.is_file(), model
        assert model.spec.is_file(), model
        assert model.violates <= PROPERTY_NAMES, model
        assert bool(model.violates) == (model.tier == "broken"), model
        # distinct states, total states and depth of every model, as last measured
        for figure in (model.states, model.total_states, model.depth):
            assert isinstance(figure, int), f"{model.name} lacks a figure"
        if model.tier == "quick":  # the budget is TLC's CPU time, which load does not inflate
            assert isinstance(model.cpu_seconds, float), f"{model.name} records no CPU time"
    # The quick tier is budgeted at under a minute in all on an idle 2-core machine, where
    # a one-worker TLC's wall time is about its CPU time.
    assert sum(m.cpu_seconds or 0 for m in QUICK) < 60


def test_the_manifest_is_the_only_source_of_the_models():
    # No hand-written model config beside the spec (the trace spec's template is not a model).
    handmade = [p.name for p in SPEC.parent.rglob("*.cfg") if p.name != "TraceDataLoader.cfg"]
    assert handmade == [], f"write these as tables of spec/models.toml: {handmade}"
    # [defaults] gives every CONSTANT of each spec module, no more (a new one needs its default
    # there); the checkpoint module's in [defaults.DataLoaderCheckpoint].
    for spec, module in ((SPEC, ""), (CHECKPOINT_SPEC, CHECKPOINT_MODULE)):
        text = spec.read_text()
        block = text[text.index("\nCONSTANTS\n") : text.index("\nASSUME")]
        declared = re.findall(r"^[ \t]+([A-Za-z]\w*)\s*,?\s*(?:\\\*.*)?$", block, flags=re.M)
        assert list(manifest.default_constants(module)) == declared, spec.name
    for model in MANIFEST:  # each generated cfg: every constant, at its model's value
        lines = model.cfg.read_text().splitlines()
        assert lines[0].startswith("\\* Generated from spec/models.toml"), model.name
        assert [f"    {k} = {v}" for k, v in model.constants.items()] == [
            line for line in lines if " = " in line
        ], model.name


def test_a_manifest_typo_is_refused(tmp_path: Path):
    path = tmp_path / "models.toml"
    path.write_text(
        "[defaults]\nNumWorkers = 2\n[M]\ntier = 'quick'\nexpect = 'pass'\n"
        "constants.NumWrokers = 1\n"
    )
    with pytest.raises(ValueError, match="NumWrokers, which \\[defaults\\] does not declare"):
        manifest.load_manifest(path, out=tmp_path)
    path.write_text("[defaults]\n[M]\ntier = 'quick'\nexpect = 'pass'\ncfg = 'M.cfg'\n")
    with pytest.raises(ValueError, match="unknown key"):
        manifest.load_manifest(path, out=tmp_path)


def test_every_checkable_property_has_a_variant_that_violates_it():
    checkable = {p.name for p in ALL_PROPERTIES if p.modelled}
    assert set().union(*(m.violates for m in BROKEN)) == checkable


def test_some_variant_violates_a_should_and_no_must():
    def level(name: str) -> Level:
        return property_named(name).level

    should_only = [m.name for m in BROKEN if all(level(p) is Level.SHOULD for p in m.violates)]
    assert should_only, "no variant witnesses the SHOULD level (every MUST holds, a SHOULD not)"


def test_no_two_models_are_the_same_model():
    seen: dict[tuple[Path, frozenset[str]], str] = {}
    for model in MANIFEST:
        key = (model.spec, _constants(model.cfg))
        assert key not in seen, f"{model.name} is the same model as {seen[key]}"
        seen[key] = model.name


# Nightly rows whose faults meet no refill, and why (docs/spec.md, "Models").
NO_REFILL = {
    "MCNightlyThreeIterable": "three workers, iterable, pin, two faults: B = 4 ran past 320 s",
    # three workers' liveness under a fault: 1.5 to 2 ms of TLC CPU a state, 38 k states at B = 3
    "MCNightlyThreeKill": "three workers' liveness with a kill: B = 3 keeps it near 70 s of CPU",
    "MCNightlyThreeHangUnordered": "three workers' liveness with a hang: B = 3, near 55 s",
}


def test_every_pair_of_factors_is_held_by_a_passing_model():
    # The pairwise design (docs/spec.md, "Models"): every pair of a loader setting and a fault
    # class (or of two of either) that a model can hold, some quick or nightly model holds.
    held = manifest.coverage(MANIFEST)
    uncovered = [sorted(p) for p, models in held.items() if not models]
    assert uncovered == [sorted(p) for p in manifest.UNAFFORDABLE], f"no model holds {uncovered}"
    # the sizes (issue 23): prefetch 3, three workers, more than one refill, each in some model
    assert {"PF 3", "3 workers", "refills"} <= set(manifest.SIZES)
    rows = [m.constants for m in LOADER_NIGHTLY]
    assert any(r["NumEpochs"] == "3" for r in rows), "three epochs once"
    for m in LOADER_NIGHTLY:  # a fault meets a refill: more tasks than the prefetch bound
        bound = int(m.constants["PrefetchFactor"]) * int(m.constants["NumWorkers"])
        assert int(m.constants["NumTasks"]) > bound or m.name in NO_REFILL, m.name


def test_the_docs_coverage_statement_is_the_manifests():
    text = (SPEC.parents[1] / "docs" / "spec.md").read_text()
    start, end = "<!-- coverage: begin -->\n", "<!-- coverage: end -->"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == manifest.coverage_table(MANIFEST), (
        "docs/spec.md's coverage statement is stale: paste `loaderspec model-check --coverage`"
    )


def test_ci_checks_liveness_of_every_configuration_without_a_timeout():
    # A timeout ends every wait, so liveness that a lost message breaks is checked where there
    # is none: the quick tier (CI) has such a liveness model for each of these settings.
    for name in ("iterable", "unordered", "persistent", "pin"):
        const, value = manifest.SETTINGS[name]
        live = [
            m.name
            for m in QUICK
            if m.properties
            and m.constants[const] == value
            and m.constants["WithTimeout"] == "FALSE"
        ]
        assert live, f"no quick liveness model without a timeout holds {name}"


def test_spec_defines_every_action_and_every_checkable_property():
    defined = _definitions(SPEC)
    assert {a.value for a in Action} <= defined
    for prop in PROPERTIES:
        # PromptFaultHandling is a wall-clock bound: no formula, a comment says so.
        assert (prop.name in defined) == (prop.check is not Check.MEASURED), prop.name
    text = SPEC.read_text()
    next_body = text[text.index("MainNext ==") : text.index("Fairness ==")]
    for action in Action:  # every action is a step of Next, not only a definition
        assert re.search(rf"\b{action.value}\b", next_body), action.value


def test_checkpoint_spec_defines_its_properties_and_every_model_checks_them():
    defined = _definitions(CHECKPOINT_SPEC)
    names = {p.name for p in module_properties(CHECKPOINT_MODULE)}
    assert names <= defined
    for model in MANIFEST:
        if model.module == CHECKPOINT_MODULE:
            assert set(tlc.cfg_invariants(model.cfg)) == names, model.name


def test_every_broken_cfg_lists_every_property_for_a_readable_first_counterexample():
    for model in BROKEN:
        props = module_properties(model.module)
        invariants = {p.name for p in props if p.check is Check.INVARIANT}
        temporal = {p.name for p in props if p.check is Check.TEMPORAL}
        assert set(tlc.cfg_invariants(model.cfg)) == invariants, model.name
        assert set(tlc.cfg_properties(model.cfg)) == temporal, model.name


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, Future[modelcheck.ModelOutcome]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {m.name: pool.submit(modelcheck.check_model, m, timeout_s=TIMEOUT_S) for m in QUICK}


@pytest.mark.parametrize("model", QUICK, ids=lambda m: m.name)
def test_quick_model_passes_with_its_figures(model: modelcheck.Model, quick_runs):
    outcome = quick_runs[model.name].result(timeout=len(QUICK) * TIMEOUT_S)
    assert outcome.found == "pass", outcome.result.output[-3000:]
    result = outcome.result
    assert (result.distinct, result.states_found, result.depth) == (
        model.states,
        model.total_states,
        model.depth,
    )
    assert result.cpu_seconds is not None
    assert result.cpu_seconds > 0


def test_every_action_takes_a_step_in_the_quick_tier(quick_runs):
    """TLC's action coverage (-coverage, in each quick model's args), over the whole tier."""
    steps: dict[str, int] = {}
    for model in QUICK:
        outcome = quick_runs[model.name].result(timeout=len(QUICK) * TIMEOUT_S)
        assert outcome.result.coverage, f"{model.name}: run without -coverage"
        for action, n in outcome.result.coverage.items():
            steps[action] = steps.get(action, 0) + n
    never = sorted(a.value for a in Action if steps.get(a.value, 0) == 0)
    assert not never, f"no quick model takes a step with {never}"


@pytest.mark.nightly
@pytest.mark.skipif(
    os.environ.get("LOADERSPEC_NIGHTLY") != "1",
    reason="the nightly tier (< 15 min): LOADERSPEC_NIGHTLY=1 pytest tests/spec -m nightly",
)
@pytest.mark.parametrize("model", NIGHTLY, ids=lambda m: m.name)
def test_nightly_model_passes_with_its_state_count(model: modelcheck.Model):
    outcome = modelcheck.check_model(model, timeout_s=900)
    assert outcome.found == "pass", outcome.result.output[-3000:]
    assert outcome.result.distinct == model.states


@pytest.fixture(scope="module")
def broken_runs() -> dict[str, Future[variantcheck.VariantOutcome]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {
            m.name: pool.submit(variantcheck.check_variant, m, timeout_s=TIMEOUT_S) for m in BROKEN
        }


@pytest.mark.parametrize("model", BROKEN, ids=lambda m: m.name)
def test_broken_variant_violates_exactly_its_properties(model: modelcheck.Model, broken_runs):
    variant = broken_runs[model.name].result(timeout=len(BROKEN) * TIMEOUT_S)
    assert variant.found == model.violates, (
        f"found {sorted(variant.found)}, manifest lists {sorted(model.violates)}\n"
        + variant.runs[-1].output[-2000:]
    )
    graph = variant.graph
    assert (graph.distinct, graph.states_found, graph.depth) == (
        model.states,
        model.total_states,
        model.depth,
    )


def test_a_variant_that_violates_more_than_listed_is_caught(broken_runs):
    """The check is exact: the same variant with one of its properties left out of the list."""
    model = next(m for m in BROKEN if m.name == "BrokenDuplicate")
    fewer = dataclasses.replace(model, violates=model.violates - {"TypeOK"})
    variant = variantcheck.check_variant(fewer, timeout_s=TIMEOUT_S)
    assert "TypeOK" in variant.found
    assert not variant.as_expected


def test_timeout_is_possible_with_later_results_buffered(tmp_path: Path):
    # The trace checker's finding: torch times out in _get_data waiting for rcvd_idx's result
    # whatever later results are buffered; the spec's MainTimeout must allow that state.
    witness = _witness(tmp_path, "MCQuickFaults", "NoTimeoutWhileBuffered")
    outcome = modelcheck.check_model(witness, timeout_s=TIMEOUT_S)
    assert outcome.found == "NoTimeoutWhileBuffered", outcome.result.output[-3000:]
    last = outcome.result.trace[-1].values
    task_info = as_function(parse(last["task_info"]))  # <<...>> when its domain is 1 .. n
    rcvd_idx = int(last["rcvd_idx"])
    assert task_info[rcvd_idx]["data"]["kind"] == "none"  # next() waits for rcvd_idx's result
    assert any(slot["data"]["kind"] != "none" for slot in task_info.values())  # a later one is in


@pytest.mark.parametrize(
    "model",
    [m for m in QUICK if "ResultCapacity = 1" in m.cfg.read_text()],
    ids=lambda m: m.name,
)
def test_a_worker_can_block_on_a_full_result_channel(tmp_path: Path, model: modelcheck.Model):
    # A put that waits for room (ResultCapacity) is a state these models reach, so the blocked-
    # pipe orphan and the stuck shutdown are expressible (not a bound that never bites).
    witness = _witness(tmp_path, model.name, "NoBlockedPut")
    outcome = modelcheck.check_model(witness, timeout_s=TIMEOUT_S)
    assert outcome.found == "NoBlockedPut", outcome.result.output[-3000:]


def _witness(tmp_path: Path, model: str, invariant: str) -> modelcheck.Model:
    """``model``'s constants with one reachability witness of MCBroken as the only check."""
    source = next(m for m in MANIFEST if m.name == model).cfg
    cfg = tmp_path / f"{invariant}.cfg"
    cfg.write_text(variantcheck.without_checks(source.read_text()) + f"INVARIANT {invariant}\n")
    spec = modelcheck.spec_dir() / "MCBroken.tla"
    return modelcheck.Model(invariant, spec, cfg, "adhoc", frozenset({invariant}))


def test_a_models_workers_reach_tlc_and_the_option_overrides_them(monkeypatch):
    # The manifest's `workers` (the nightly's longest runs: 2) is TLC's -workers; --workers N wins.
    seen: list[int] = []

    def fake_run(spec, cfg, *, workers, **_kw):
        seen.append(workers)
        return tlc.TlcResult(True, None, [], 1, 1, 0.0, "", None)

    monkeypatch.setattr(modelcheck.tlc, "run_tlc", fake_run)
    longest = max(NIGHTLY, key=lambda m: m.states or 0)
    assert longest.workers == 2, "the longest nightly run has TLC's two worker threads"
    modelcheck.check_model(longest)
    modelcheck.check_model(longest, workers=1)
    modelcheck.check_model(QUICK[0])
    assert seen == [2, 1, 1]


# --- issue 38 ---------------------------------------------------------------------------------


def test_the_old_nothing_lost_on_the_way_accepted_a_persistent_retire_with_none(tmp_path: Path):
    # PersistentRetireSendsNone: the retired worker exits on its None, the next epoch's resume is
    # never acknowledged and iter() times out. The property before issue 38 excused any worker
    # not alive; the manifest's run shows NoSilentLoss (the new one) violated.
    assert _holds_the_old_property(
        "PersistentRetireSendsNone", "NothingLostOnTheWayBefore38", tmp_path
    )


def _holds_the_old_property(variant: str, old_property: str, tmp_path: Path) -> bool:
    """Whether ``variant`` (which violates NoSilentLoss, per the manifest) passes TLC with
    ``old_property``, an earlier form of NothingLostOnTheWay kept in MCBroken.tla, as its only
    check."""
    model = next(m for m in BROKEN if m.name == variant)
    assert model.violates == {"NoSilentLoss"}
    cfg = tmp_path / "old.cfg"
    cfg.write_text(
        variantcheck.without_checks(model.cfg.read_text()) + f"INVARIANT {old_property}\n"
    )
    old = modelcheck.Model(old_property, model.spec, cfg, "adhoc")
    return modelcheck.check_model(old, timeout_s=TIMEOUT_S).found == "pass"


def test_a_variant_shape_is_held_only_by_a_model_with_its_settings_and_faults():
    by_name = {m.name: m for m in MANIFEST}
    lost_end = by_name["LostShardEnd"]  # an IterableDataset through the pin thread
    assert manifest.holds_shape(by_name["MCQuickIterablePin"], lost_end)
    assert not manifest.holds_shape(by_name["MCQuickMap"], lost_end)  # no IterableDataset
    assert not manifest.holds_shape(by_name["MCQuickIterable"], lost_end)  # no pin thread
    window = by_name["PerLoaderPrefetchWindow"]  # breaks a temporal property: liveness needed
    assert not manifest.holds_shape(by_name["MCQuickFaults"], window)
    assert manifest.holds_shape(by_name["MCQuickMap"], window)


def test_the_quick_tier_holds_the_shape_of_every_variant():
    # CI (the quick tier) runs every loader shape a broken variant gets wrong, so it is never only
    # the nightly tier that can reject one (the iterable + persistent and iterable + pin shapes).
    shapes = manifest.variant_shapes(MANIFEST)
    assert {name for name, tiers in shapes.items() if not tiers["quick"]} == set()


def test_the_docs_variants_statement_is_the_manifests():
    text = (SPEC.parents[1] / "docs" / "spec.md").read_text()
    start, end = "<!-- variants: begin -->\n", "<!-- variants: end -->"
    shown = text[text.index(start) + len(start) : text.index(end)]
    assert shown == manifest.variant_table(MANIFEST), (
        "docs/spec.md's variants statement is stale: paste `loaderspec model-check --variants`"
    )


def test_the_nothing_lost_on_the_way_before_the_kill_was_told_accepted_a_killing_retire(
    tmp_path: Path,
):
    # RetireKillsWorker: a persistent loader kills the exhausted worker it retires; the next
    # epoch's resume is never acknowledged. The property that took any killed worker for a death
    # excused it; the manifest's run shows NoSilentLoss (a fault's death only) violated.
    assert _holds_the_old_property("RetireKillsWorker", "NothingLostOnTheWayBeforeKill", tmp_path)


# --- any number of workers: the inductive invariant (spec/MCInductive.tla) ---------------------

INDUCTIVE = [m for m in NIGHTLY if m.spec.name == manifest.INDUCTIVE_SPEC]


def test_the_inductive_invariant_is_checked_from_every_state_of_it_in_the_nightly_tier():
    # IndSpec starts from every state of IndInv; one model runs the ordinary Spec (Init => IndInv).
    assert {m.constants["NumWorkers"] for m in INDUCTIVE} == {"1", "2", "3"}
    assert {m.constants["PrefetchFactor"] for m in INDUCTIVE} == {"1", "2", "3"}
    for model in INDUCTIVE:
        text = model.cfg.read_text()
        assert "IndInv" in text.split("INVARIANTS")[1], model.name
    assert any("Spec <- IndSpec" not in m.cfg.read_text() for m in INDUCTIVE), "Init => IndInv"


def test_the_inductiveness_check_fails_for_a_step_that_leaves_the_invariant(tmp_path: Path):
    # The window one task larger: from a state of IndInv with a full window, MainTryPutIndex leaves
    # it; TLC finds that at depth 2.
    model = next(m for m in INDUCTIVE if "Spec <- IndSpec" in m.cfg.read_text())
    cfg = tmp_path / "broken.cfg"
    text = variantcheck.without_checks(model.cfg.read_text())
    text = text.replace(
        "    Spec <- IndSpec", "    Spec <- IndSpec\n    PrefetchRoom <- WindowOneLarger"
    )
    cfg.write_text(text + "INVARIANT IndInv\n")
    broken = modelcheck.Model("IndWindowOneLarger", model.spec, cfg, "adhoc", args=model.args)
    assert modelcheck.check_model(broken, timeout_s=TIMEOUT_S).found == "IndInv"
