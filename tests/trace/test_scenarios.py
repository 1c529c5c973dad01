"""Spec-generated fault scenarios: for every spec action, a behaviour of a small model taking it
becomes a fault schedule, replayed through faultinject against the reference loader; every
replay meets a correct loader's expectations, every trace is a behaviour of the spec, and the
traces together exercise every spec action (coverage 100%, fault actions included)."""

from __future__ import annotations

import pytest

from loaderspec import scenarios, tracecheck
from loaderspec.stategraph import parse_dot, shortest_path_taking

DOT = r"""strict digraph DiskGraph {
1 [label="/\\ x = 0\n/\\ q = <<[kind |-> \"task\", idx |-> 3]>>",style = filled]
1 -> 2 [label="Inc",color="black",fontcolor="black"];
2 [label="/\\ x = 1\n/\\ q = <<>>"];
2 -> 3 [label="Dec",color="black",fontcolor="black"];
3 [label="/\\ x = 0\n/\\ q = <<>>"];
}"""


def test_a_dumped_graph_reads_back_with_labels_and_states():
    g = parse_dot(DOT)
    assert g.initial == ["1"]
    assert g.actions == {"Inc", "Dec"}
    assert g.state("1") == {"x": 0, "q": ({"kind": "task", "idx": 3},)}
    assert [s.action for s in shortest_path_taking(g, "Dec")] == ["Inc", "Dec"]
    assert shortest_path_taking(g, "Nope") is None


def test_a_loader_class_is_replayed_by_its_importable_name():
    from loaderspec.faultinject.loaders import LoaderRefError, ref_of, resolve
    from loaderspec.reference import DataLoader

    from loaderspec.replay import Schedule, play

    assert ref_of("torch.utils.data:DataLoader") == "torch.utils.data:DataLoader"
    assert resolve(ref_of(DataLoader)) is DataLoader  # conformance's loader_cls works too

    class Local(DataLoader):
        pass

    with pytest.raises(LoaderRefError, match="module level"):
        play(Schedule("local"), Local)


@pytest.mark.slow
def test_spec_scenarios_cover_every_action_and_pass(tmp_path):
    found = scenarios.covering_scenarios()
    # Every action is reachable in some model: the translation has something to replay.
    reachable = set().union(*(scenarios.graph(m).actions for m in scenarios.MODELS))
    assert reachable >= scenarios.ALL_ACTIONS, sorted(scenarios.ALL_ACTIONS - reachable)
    replays = scenarios.replay_scenarios(found, trace_root=tmp_path)
    problems = {r.schedule.name: v for r in replays if (v := scenarios.violations(r))}
    assert not problems, problems
    runs = tracecheck.runs_of([r.trace_dir for r in replays])
    verdicts = tracecheck.check_runs(runs)
    rejected = [v.explain() for v in verdicts if not v.ok]
    assert not rejected, "\n\n".join(rejected)
    seen, share = scenarios.coverage(v.run for v in verdicts)
    print(f"\nspec action coverage of {len(found)} spec scenarios: {share:.0%}")
    assert share == 1.0, f"not exercised: {sorted(scenarios.ALL_ACTIONS - seen)}"


@pytest.mark.nightly
def test_spec_scenarios_black_box_against_torch():
    """The same scenarios against torch's DataLoader, black-box (no traces): everything holds
    but the parent kill, where torch's workers outlive the killed loader (its watchdog looks
    at the parent only between tasks), and a batch that cannot be pickled or read back, which
    torch loses and then waits for (B2, G2), as docs/spec.md says."""
    pytest.importorskip("torch")
    found = scenarios.covering_scenarios()
    replays = scenarios.replay_scenarios(found, "torch.utils.data:DataLoader")
    problems = {r.schedule.name: v for r in replays if (v := scenarios.violations(r))}
    parent_kills = {r.schedule.name for r in replays if r.schedule.kill_parent_at is not None}
    lost = {
        r.schedule.name
        for r in replays
        if any(type(f).__name__ in ("Unpicklable", "Unloadable") for f in r.schedule.faults)
    }
    assert parent_kills, "no scenario kills the loader's process"
    assert lost, "no scenario loses a batch to pickling"
    assert set(problems) == parent_kills | lost, problems
    for name in parent_kills:
        assert any(p.startswith("NoOrphanWorkers") for p in problems[name]), problems[name]
    for name in lost:
        assert any(p.startswith("IterationTerminates") for p in problems[name]), problems[name]
