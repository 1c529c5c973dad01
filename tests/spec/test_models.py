"""The spec's models give their recorded results: the quick tier passes with its state counts,
and every broken variant fails for exactly the property it names (spec/models.toml).

The broken variants run two at a time (each TLC uses one worker thread) to keep CI in budget.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from loaderspec import modelcheck, tlc
from loaderspec.vocabulary import PROPERTIES, PROPERTY_NAMES, Action, Kind

MANIFEST = modelcheck.load_manifest()
QUICK = [m for m in MANIFEST if m.tier == "quick"]
BROKEN = [m for m in MANIFEST if m.tier == "broken"]
NIGHTLY = [m for m in MANIFEST if m.tier == "nightly"]
SPEC = modelcheck.spec_dir() / "DataLoader.tla"
TIMEOUT_S = 240.0


def _definitions(path: Path) -> set[str]:
    text = re.sub(r"\(\*.*?\*\)", "", path.read_text(), flags=re.S)
    return set(re.findall(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))


def test_manifest_is_complete_and_points_at_real_files():
    assert {m.tier for m in MANIFEST} == {"quick", "nightly", "broken"}
    for model in MANIFEST:
        assert model.cfg.is_file(), model
        assert model.spec.is_file(), model
        assert model.expect == "pass" or model.expect in PROPERTY_NAMES, model
        if model.tier != "nightly":
            assert isinstance(model.states, int), f"{model.name} records no state count"
        if model.tier == "quick":  # the budget is TLC's CPU time, which load does not inflate
            assert isinstance(model.cpu_seconds, float), f"{model.name} records no CPU time"
    # The quick tier is budgeted at under a minute in all on an idle 2-core machine, where
    # a one-worker TLC's wall time is about its CPU time.
    assert sum(m.cpu_seconds or 0 for m in QUICK) < 60


def test_every_checkable_property_has_a_broken_variant():
    checkable = {p.name for p in PROPERTIES if p.kind is not Kind.MEASURED}
    assert {m.expect for m in BROKEN} >= checkable


def test_spec_defines_every_action_and_every_checkable_property():
    defined = _definitions(SPEC)
    assert {a.value for a in Action} <= defined
    for prop in PROPERTIES:
        # PromptFaultHandling is a wall-clock bound: no formula, a comment says so.
        assert (prop.name in defined) == (prop.kind is not Kind.MEASURED), prop.name
    text = SPEC.read_text()
    next_body = text[text.index("MainNext ==") : text.index("Fairness ==")]
    for action in Action:  # every action is a step of Next, not only a definition
        assert re.search(rf"\b{action.value}\b", next_body), action.value


def test_quick_tier_covers_the_required_configurations():
    text = {m.name: m.cfg.read_text() for m in QUICK}
    joined = "\n".join(text.values())
    for needle in (
        "InOrder = TRUE",
        "InOrder = FALSE",
        "Iterable = TRUE",
        "Persistent = TRUE",
        "NumEpochs = 2",
        "PinMemory = TRUE",
        "PinMemory = FALSE",
        "PROPERTIES",
    ):
        assert needle in joined, needle
    for fault in ("WithKillWorker", "WithKillParent", "WithHang", "WithFetchError", "WithTimeout"):
        assert f"{fault} = TRUE" in joined, fault


@pytest.mark.parametrize("model", QUICK, ids=lambda m: m.name)
def test_quick_model_passes_with_its_state_count(model: modelcheck.Model):
    outcome = modelcheck.check_model(model, timeout_s=TIMEOUT_S)
    assert outcome.found == "pass", outcome.result.output[-3000:]
    assert outcome.result.distinct == model.states
    assert outcome.result.cpu_seconds is not None
    assert outcome.result.cpu_seconds > 0


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
def broken_runs() -> dict[str, Future[modelcheck.Outcome]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {m.name: pool.submit(modelcheck.check_model, m, timeout_s=TIMEOUT_S) for m in BROKEN}


@pytest.mark.parametrize("model", BROKEN, ids=lambda m: m.name)
def test_broken_variant_fails_for_its_property(model: modelcheck.Model, broken_runs):
    outcome = broken_runs[model.name].result(timeout=len(BROKEN) * TIMEOUT_S)
    assert outcome.found == model.expect, outcome.result.output[-3000:]
    assert outcome.result.trace, "a violation comes with its counterexample"
    assert outcome.result.distinct == model.states


def test_timeout_is_possible_with_later_results_buffered(tmp_path: Path):
    # The trace checker's finding: torch times out in _get_data waiting for rcvd_idx's result
    # whatever later results are buffered; the spec's MainTimeout must allow that state.
    faults = (modelcheck.spec_dir() / "models" / "MCQuickFaults.cfg").read_text()
    cfg = tmp_path / "Witness.cfg"
    cfg.write_text(faults[: faults.index("INVARIANTS")] + "INVARIANT NoTimeoutWhileBuffered\n")
    witness = modelcheck.Model(
        "Witness", modelcheck.spec_dir() / "MCBroken.tla", cfg, "adhoc", "NoTimeoutWhileBuffered"
    )
    outcome = modelcheck.check_model(witness, timeout_s=TIMEOUT_S)
    assert outcome.found == "NoTimeoutWhileBuffered", outcome.result.output[-3000:]
    last = outcome.result.trace[-1].values
    task_info = tlc.parse_value(last["task_info"])
    rcvd_idx = int(last["rcvd_idx"])
    assert task_info[rcvd_idx]["data"]["kind"] == "none"  # next() waits for rcvd_idx's result
    assert any(slot["data"]["kind"] != "none" for slot in task_info.values())  # a later one is in
