"""``loaderspec trace-check LOG_OR_DIR...``: is each logged run a behaviour of the spec?

Owns the verdict: it merges the logs (``loaderspec.traces``), compiles batches of runs that share
the spec's constants into one generated module each (``loaderspec.tracecompile``), runs TLC on
``spec/TraceDataLoader.tla`` once per batch (``loaderspec.tlc``), and reads TLC's progress
lines to decide, per run:

* ``ACCEPTED``: TLC reached a state in which every record of the run was consumed, each by the
  spec action it names with the logged parameters and post-state, and the run had ended
  (``TraceEnded``: the iterator's shutdown finished, or its process died and every worker exited).
* ``INCOMPLETE``: every record is a spec step, but the run stops short of an end: a log that
  lost its last events.
* ``NOT-A-BEHAVIOUR``: record ``line`` is the first one that no spec step allows after the ones
  before it. A second, one-run TLC call prints the spec state there; a third, with the post-state
  comparison off, tells "the action is not enabled" from "it is, but the logged state differs".
* ``VIOLATES``: every record is a step, but a spec invariant fails along the way.
* ``ERROR``: TLC could not evaluate the model (its output is kept).

Before TLC: every record must carry the fields its action requires (the vocabulary's schema;
a stripped record is bad input, exit 2). In TLC: the spec's invariants along every run, and
``SpecStep`` (``[][Next]_vars``) as a PROPERTY, so each step the trace spec takes is a spec step.

The progress lines come from the trace spec's ``TraceProgress`` invariant, which prints
``<<"TRACE-AT", run, l, ended>>`` once per distinct state (it is always true); that is the
"reachability" check: a run passes iff some state has ``l = Len(log) + 1`` and ``ended``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderspec import tlc
from loaderspec.tlavalues import NotParsable, as_function, parse
from loaderspec.tracecompile import (
    BASE_SPEC,
    SPEC_STEP,
    Constants,
    TraceConfigError,
    constants_for,
    spec_dir,
    write_model,
)
from loaderspec.traces import (
    IteratorTrace,
    Record,
    TraceFormatError,
    check_record_fields,
    iter_dirs,
    merge,
    read_file,
    split_runs,
)
from loaderspec.vocabulary import (
    CHECKPOINT_FIELD,
    CONFIG_ACTION,
    CONFIG_FIELDS,
    CONFIG_START,
    Check,
    UserAction,
    module_properties,
)

ACCEPTED = "ACCEPTED"
INCOMPLETE = "INCOMPLETE"
NOT_A_BEHAVIOUR = "NOT-A-BEHAVIOUR"
VIOLATES = "VIOLATES"
ERROR = "ERROR"

# Spec invariants checked along every trace: every invariant of the spec the trace spec extends
# (the MUST/SHOULD invariants the spec's correct model satisfies, the NOTE's shutdown read off
# the history the records rebuild among them), read off the vocabulary, so that a new one is
# checked here once it is added there. A trace can be a behaviour of the spec's steps and still
# break one only if the model checking missed it, so checking them here costs little and guards
# the models' size.
TRACE_INVARIANTS: tuple[str, ...] = tuple(
    p.name for p in module_properties(BASE_SPEC) if p.check is Check.INVARIANT
)
BATCH_SIZE = 40  # runs per TLC call: one JVM start (~1.5 s) shared, modules kept small
TLC_TIMEOUT_S = 300.0
_PROGRESS_RE = re.compile(r'<<"TRACE-AT", (\d+), (\d+), (TRUE|FALSE)>>')
_HIDDEN_VARS = frozenset({"tr", "l"})


@dataclass(frozen=True)
class RunVerdict:
    """What trace validation concluded about one run."""

    run: IteratorTrace
    status: str
    line: int | None = None  # 1-based record number in the run: the first one not allowed
    invariant: str | None = None  # VIOLATES: the invariant
    state: dict[str, str] = field(default_factory=dict)  # spec state before ``line``
    enabled: bool | None = None  # NOT-A-BEHAVIOUR: was the action enabled, state aside?
    spec_post: dict[str, str] = field(default_factory=dict)  # ...and the state it would reach
    detail: str = ""
    seconds: float = 0.0  # this run's share of its batch's TLC time

    @property
    def ok(self) -> bool:
        return self.status == ACCEPTED

    @property
    def record(self) -> Record | None:
        """The first record the spec does not allow, if any."""
        if self.line is None or not 1 <= self.line <= len(self.run.records):
            return None
        return self.run.records[self.line - 1]

    def explain(self) -> str:
        """The verdict as a person reads it (what ``loaderspec trace-check`` prints)."""
        head = f"{self.status}: {self.run.name} ({len(self.run.records)} records)"
        if self.ok:
            return head
        out = [head]
        record = self.record
        if self.status == NOT_A_BEHAVIOUR and record is not None and self.line is not None:
            out.append(f"  first record the spec does not allow: #{self.line} {record.source}")
            out.append(f"    {record.brief()}")
            start = max(0, self.line - 4)
            for number, before in enumerate(self.run.records[start : self.line - 1], start + 1):
                out.append(f"      after #{number} {before.brief()}")
            if record.state:
                out.append(f"    logged post-state: {record.state}")
            rule = USER_RULES.get(record.action)
            if rule is not None:
                began = self.run.config.get(CONFIG_START)
                out.append(f"    logged checkpoint: {record.field(CHECKPOINT_FIELD)}")
                out.append(f"    the run's iterator began from: {began}")
                out.append(f"  {rule}")
            if self.enabled is True and rule is not None:
                out.append("  the spec takes this step here, but not with this checkpoint")
            elif self.enabled is True:
                out.append("  the spec takes this action here, but reaches another state:")
                out += _diff_lines(record, self.spec_post)
            elif self.enabled is False:
                out.append("  the spec does not enable this action (with these parameters) here")
        elif self.status == INCOMPLETE:
            out.append(
                "  every record is a spec step, but the run does not end: the iterator never"
                " finished shutting down (a log that lost its last events?)"
            )
        elif self.status == VIOLATES:
            out.append(f"  spec invariant {self.invariant} fails after record #{self.line}")
        if self.detail:
            out.append("  " + self.detail.replace("\n", "\n  "))
        if self.state:
            where = "before that record" if self.status == NOT_A_BEHAVIOUR else "at that point"
            out.append(f"  spec state {where}:")
            order = _variable_order()
            names = sorted(self.state, key=lambda k: (order.get(k, len(order)), k))
            out += [f"    {k} = {self.state[k]}" for k in names if k not in _HIDDEN_VARS]
        return "\n".join(out)


@functools.cache
def _variable_order() -> dict[str, int]:
    """The spec's variables in the order DataLoader.tla declares them (main process first)."""
    text = (spec_dir() / f"{BASE_SPEC}.tla").read_text()
    _, _, block = text.partition("\nVARIABLES")
    block = block.split("\n\n", 1)[0]
    names = re.findall(r"^\s+([a-z_][a-z_0-9]*)\s*,?\s*(?:\\\*.*)?$", block, flags=re.M)
    return {name: i for i, name in enumerate(names)}


def _as_logged(name: str, printed: str) -> Any:
    """A spec variable as TLC printed it, in the shape a trace record logs it (so the two can
    be compared): functions over worker ids become lists, task_info's entries
    ``[worker, buffered]``."""
    try:
        value = parse(printed)
    except NotParsable:
        return printed
    if name == "task_info":  # a sequence when its domain is 1 .. n (as_function)
        return {
            str(i): [entry["worker"], entry["data"]["kind"] != "none"]
            for i, entry in sorted(as_function(value).items())
        }
    if isinstance(value, dict) and sorted(value) == list(range(len(value))):
        return [value[i] for i in range(len(value))]
    return value


def _diff_lines(record: Record, spec_post: dict[str, str]) -> list[str]:
    """The logged post-state fields that differ from the spec's, side by side."""
    lines = []
    for name, logged in (record.state or {}).items():
        if name in spec_post:
            spec_value = _as_logged(name, spec_post[name])
            if spec_value != logged:
                lines.append(f"    {name}: logged {logged!r}, spec {spec_value!r}")
    if record.epoch is not None and "epoch" in spec_post and record.actor == "Main":
        spec_epoch = _as_logged("epoch", spec_post["epoch"])
        if spec_epoch != record.epoch:
            lines.append(f"    epoch: logged {record.epoch!r}, spec {spec_epoch!r}")
    return lines or ["    (no logged field differs: a parameter of the record does)"]


def _furthest(output: str) -> dict[int, int]:
    """Per run: the furthest ``l`` any state reached (records 1..l-1 consumed)."""
    furthest: dict[int, int] = {}
    for match in _PROGRESS_RE.finditer(output):
        run, line = int(match.group(1)), int(match.group(2))
        furthest[run] = max(furthest.get(run, 0), line)
    return furthest


def _ended_at(output: str) -> dict[int, set[int]]:
    """Per run: the ``l`` values of states that print ``ended``."""
    ends: dict[int, set[int]] = {}
    for match in _PROGRESS_RE.finditer(output):
        if match.group(3) == "TRUE":
            ends.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return ends


def _violations(output: str) -> dict[int, tuple[str, int, dict[str, str]]]:
    """With ``-continue``, every invariant violation: run -> (invariant, l, state)."""
    found: dict[int, tuple[str, int, dict[str, str]]] = {}
    chunks = re.split(r"^Error: Invariant (\w+) is violated\.?$", output, flags=re.M)
    for name, body in zip(chunks[1::2], chunks[2::2], strict=True):
        states = tlc.parse_trace(body)
        if not states or name == "TraceNotAtStop":
            continue
        last = states[-1].values
        try:
            run, line = int(last.get("tr", "")), int(last.get("l", ""))
        except ValueError:
            continue
        found.setdefault(run, (name, line, last))
    return found


def _run_model(
    workdir: Path, name: str, runs: Sequence[IteratorTrace], constants: Constants, **cfg: object
) -> tlc.TlcResult:
    tla, cfg_path = write_model(workdir, name, runs, constants, **cfg)
    return tlc.run_tlc(
        tla,
        cfg_path,
        workdir=workdir,
        extra_args=("-deadlock", "-continue"),
        timeout_s=TLC_TIMEOUT_S,
        # A batch is a few thousand states: the JVM's start-up is most of the cost, and C1
        # alone halves it (measured: 17.1 s -> 7.3 s for 29 runs, 1,999 states).
        jvm_args=tlc.FAST_START,
    )


def _state_at(
    workdir: Path, run: IteratorTrace, constants: Constants, line: int, *, check_post: bool = True
) -> tuple[bool, dict[str, str]]:
    """Run one run alone, stopping at the first state whose next record is ``line``.

    Returns whether TLC got there, and the spec state it printed there.
    """
    name = f"TraceStop{line}{'' if check_post else 'Free'}"
    result = _run_model(
        workdir / name,
        name,
        [run],
        constants,
        invariants=(),
        stop_trace=1,
        stop_line=line,
        check_post_state=check_post,
    )
    if result.violated != "TraceNotAtStop":
        return False, {}
    if result.trace:
        return True, dict(result.trace[-1].values)
    return True, _initial_state(result.output)


def _initial_state(output: str) -> dict[str, str]:
    """The state TLC prints after "... is violated by the initial state:" (no "State 1:")."""
    _, _, after = output.partition("is violated by the initial state:")
    values: dict[str, str] = {}
    current = None
    for line in after.splitlines()[1:]:
        if not line.strip():
            break
        match = re.match(r"^/\\ ([A-Za-z_]\w*) = (.*)$", line)
        if match:
            current = match.group(1)
            values[current] = match.group(2).strip()
        elif current is not None:
            values[current] += " " + line.strip()
    return values


def localise(verdict: RunVerdict) -> RunVerdict:
    """A rejection with the spec state before its first bad record and, for NOT-A-BEHAVIOUR,
    whether that record's action was enabled there (two more TLC calls, one run each)."""
    if verdict.ok or verdict.line is None:
        return verdict
    with tempfile.TemporaryDirectory(prefix="loaderspec-trace-") as tmp:
        return _localise(Path(tmp), verdict, constants_for(verdict.run))


def _localise(workdir: Path, verdict: RunVerdict, constants: Constants) -> RunVerdict:
    if verdict.line is None:
        return verdict
    _, state = _state_at(workdir, verdict.run, constants, verdict.line)
    enabled: Any = None
    post: dict[str, Any] = {}
    if verdict.status == NOT_A_BEHAVIOUR:
        enabled, post = _state_at(
            workdir, verdict.run, constants, verdict.line + 1, check_post=False
        )
    return RunVerdict(
        verdict.run,
        verdict.status,
        verdict.line,
        verdict.invariant,
        state,
        enabled,
        post,
        verdict.detail,
        verdict.seconds,
    )


def _judge_batch(
    runs: Sequence[IteratorTrace], result: tlc.TlcResult, share: float
) -> list[RunVerdict]:
    if result.violated is not None and result.violated not in _violation_names(result.output):
        tail = "\n".join(result.output.splitlines()[-25:])
        why = f"TLC: {result.violated}"
        if result.violated == SPEC_STEP:
            why += (
                " (a step the trace spec took is no step of DataLoader's Next: the trace spec"
                " is wrong, whatever the log says)"
            )
        return [RunVerdict(run, ERROR, detail=f"{why}\n{tail}") for run in runs]
    furthest = _furthest(result.output)
    ends = _ended_at(result.output)
    bad = _violations(result.output)
    verdicts = []
    for number, run in enumerate(runs, start=1):
        last = len(run.records) + 1
        reached = furthest.get(number, 0)
        if number in bad:
            name, line, state = bad[number]
            verdicts.append(RunVerdict(run, VIOLATES, line - 1, name, state, seconds=share))
        elif last in ends.get(number, set()):
            verdicts.append(RunVerdict(run, ACCEPTED, seconds=share))
        elif reached >= last:
            verdicts.append(RunVerdict(run, INCOMPLETE, last, seconds=share))
        elif _main_log_cut(run, max(reached, 1)):
            # (gate, issue 21) The main process's log lost its tail while its workers' logs go
            # on: a prefix of the run, which the spec never judged whole, not a wrong step.
            at = max(reached, 1)
            verdicts.append(
                RunVerdict(run, INCOMPLETE, at, detail=MSG_CUT.format(at=at), seconds=share)
            )
        else:
            verdicts.append(RunVerdict(run, NOT_A_BEHAVIOUR, max(reached, 1), seconds=share))
    return verdicts


MSG_CUT = (
    "the main process's log ends before record #{at}, and every record after its last one is"
    " another process's: its file lost its tail (a log cut short), so the run is judged as far"
    " as the main process's log goes"
)


# What a user's checkpoint record is held to (spec/TraceDataLoader.tla, "Checkpoints").
USER_RULES: dict[str, str] = {
    UserAction.USER_STATE_DICT.value: (
        "a state_dict() of the live iterator counts exactly what its run handed out, on top of"
        " where it began (CheckpointIsHandedOut), each worker's user state ('user') is the one"
        " its last batch handed out brought (the MainProcessData record's 'user'; none this"
        " epoch: the start's), and its generator state ('rng') is the one the run's other states"
        " and start name for that epoch; one before the iterator is the state the next iter()"
        " starts from, the last one loaded (LoadIsNeverIgnored)"
    ),
    UserAction.USER_LOAD_STATE_DICT.value: (
        "the last state loaded before an iterator is the one it began from, its user states and"
        " generator state ('user', 'rng') included, and its run sends exactly the sampler"
        " positions that state had not handed out (LoadIsNeverIgnored)"
    ),
}


def _main_log_cut(run: IteratorTrace, at: int) -> bool:
    """Whether record ``at`` (the first one no spec step allows) comes after the main process's
    last record: that file was cut short, the others were not. (The user's checkpoint records
    are the main process's too.)"""
    mains = [i for i, r in enumerate(run.records, start=1) if r.actor in ("Main", "User")]
    return bool(mains) and at > mains[-1]


def _violation_names(output: str) -> set[str]:
    return set(re.findall(r"^Error: Invariant (\w+) is violated", output, flags=re.M))


def check_runs(
    runs: Sequence[IteratorTrace],
    *,
    batch_size: int = BATCH_SIZE,
    invariants: Sequence[str] = TRACE_INVARIANTS,
    localise: bool = True,
    check_post_state: bool = True,
    jobs: int = 1,
) -> list[RunVerdict]:
    """Validate runs against the spec, batching those with the same constants into one TLC call;
    ``jobs`` TLC calls at a time (each is a JVM of its own: on a machine with cores to spare,
    runs of many different configurations check in a fraction of the time).

    Verdicts come back in the order of ``runs``.

    Raises:
        TraceFormatError: a run that cannot be checked (``checkable_constants``): no verdict.
    """
    groups: dict[Constants, list[int]] = {}
    for index, run in enumerate(runs):
        groups.setdefault(checkable_constants(run), []).append(index)
    batches = [
        (f"{batch_no}_{start}", constants, indexes[start : start + batch_size])
        for batch_no, (constants, indexes) in enumerate(groups.items())
        for start in range(0, len(indexes), batch_size)
    ]
    verdicts: dict[int, RunVerdict] = {}
    with tempfile.TemporaryDirectory(prefix="loaderspec-trace-") as tmp:

        def check(name: str, constants: Constants, chunk: list[int]) -> list[RunVerdict]:
            workdir = Path(tmp) / f"batch{name}"
            batch = [runs[i] for i in chunk]
            result = _run_model(
                workdir,
                f"TraceRuns{name}",
                batch,
                constants,
                invariants=invariants,
                check_post_state=check_post_state,
            )
            share = result.seconds / len(batch)
            out = []
            for verdict in _judge_batch(batch, result, share):
                if localise and verdict.status in (NOT_A_BEHAVIOUR, INCOMPLETE, VIOLATES):
                    verdict = _localise(workdir, verdict, constants)
                out.append(verdict)
            return out

        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            done = pool.map(lambda b: check(*b), batches)
            for (_, _, chunk), found in zip(batches, done, strict=True):
                verdicts.update(zip(chunk, found, strict=True))
    return [verdicts[i] for i in range(len(runs))]


def runs_of(paths: Iterable[Path | str]) -> list[IteratorTrace]:
    """Each argument's runs: a directory's files merged together, a file on its own.

    Raises:
        TraceFormatError: a malformed record (file and line named), a record without a field its
            action requires, a header the spec's constants cannot be read from, or an argument
            with no record at all.
        FileNotFoundError: a path that does not exist or holds no trace file.
    """
    runs: list[IteratorTrace] = []
    for name, files in iter_dirs(paths):
        records = merge(r for path in files for r in read_file(path))
        found = split_runs(records, name)
        if not found:
            raise TraceFormatError(
                f"{name}: no trace record to check (an empty file, or only a line cut off"
                " mid-write); give the directory a traced run wrote (LOADERSPEC_TRACE_DIR)"
            )
        runs.extend(found)
    return runs


def checkable_constants(run: IteratorTrace) -> Constants:
    """The run's spec constants, once its records are known to carry every field their action
    requires (``check_record_fields``).

    Raises:
        TraceFormatError: a record missing a field, or a header the constants cannot be read
            from (naming the run and the field).
    """
    check_record_fields(run)
    try:
        return constants_for(run)
    except TraceConfigError as exc:
        raise TraceFormatError(
            f"{run.name}: its {CONFIG_ACTION!r} record: {exc} (a header gives"
            f" {', '.join(CONFIG_FIELDS)})"
        ) from None


def default_jobs() -> int:
    """TLC calls at a time by default: one per core, at most 4 (each JVM takes a core)."""
    return max(1, min(4, os.cpu_count() or 1))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``LOG_OR_DIR...`` and the batch options."""
    parser.add_argument(
        "logs",
        nargs="+",
        metavar="LOG_OR_DIR",
        help="a trace directory (its trace-*.jsonl files are one run's processes) or a file",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_SIZE,
        help=f"runs checked per TLC call (default {BATCH_SIZE})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=default_jobs(),
        help=f"TLC calls at a time (default {default_jobs()}: this machine's cores, at most 4)",
    )
    parser.add_argument(
        "--no-post-state",
        action="store_true",
        help="take each record's action whatever post-state it logged (to find the next problem)",
    )
    parser.add_argument(
        "--no-invariants",
        action="store_true",
        help="check only that each run is a behaviour, not the spec's invariants along it",
    )


def run(args: argparse.Namespace) -> int:
    """Check every run; print one verdict each. Exit 0 iff all are accepted, 1 if not, 2 on
    bad input (no record at all, a line that is not a record, a record missing a field its
    action requires, an unreadable header: one line naming it) or a TLC that cannot run."""
    started = time.monotonic()
    try:
        runs = runs_of(args.logs)
        for run in runs:  # every run readable before any TLC call
            checkable_constants(run)
        verdicts = check_runs(
            runs,
            batch_size=max(1, args.batch_size),
            invariants=() if args.no_invariants else TRACE_INVARIANTS,
            check_post_state=not args.no_post_state,
            jobs=max(1, args.jobs),
        )
    except (TraceFormatError, FileNotFoundError, tlc.TlcNotFound) as exc:
        print(f"loaderspec trace-check: {exc}", file=sys.stderr)
        return 2
    for verdict in verdicts:
        print(verdict.explain())
    passed = sum(v.ok for v in verdicts)
    elapsed = time.monotonic() - started
    print(
        f"{passed}/{len(verdicts)} runs are behaviours of the spec"
        f" ({elapsed:.1f} s, {elapsed / max(1, len(verdicts)):.2f} s per run)"
    )
    if any(v.status == ERROR for v in verdicts):
        return 2
    return 0 if passed == len(verdicts) else 1
