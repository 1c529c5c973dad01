"""Read, merge and group the reference loader's per-process trace logs.

This module owns the log side of trace validation: finding the ``trace-<pid>.jsonl`` files of a
run, parsing each line into a ``Record`` (and saying which line of which file is malformed),
merging the processes' records into one sequence by their monotonic ``t``, and splitting that
sequence into the runs of one iterator each. It must not know TLA+ (``loaderspec.tracecompile``
turns records into a module) nor how TLC runs (``loaderspec.tracecheck``).

Merging. Every process stamps its records with ``time.monotonic_ns()``, which is one system-wide
clock on Linux, and logs a put *before* the put happens and a get *after* it returns, so sorting
by ``t`` puts every get after its put. Ties (two processes on the same nanosecond) are broken so
that the merged order is still causal: a ``Fault*`` record first (the injector logs it before it
sends the signal), then puts (the record was written before the message existed), then every
other record, then gets; then by pid, then by position in the file. Within one file the order of
lines wins over ``t`` when both records come from the same thread of control only in that a
stable sort keeps file order among equal keys.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from loaderspec.vocabulary import (
    CHECKPOINT_FIELD,
    CONFIG_ACTION,
    TRACE_FILE,
    TRACE_GLOB,
    Action,
    Actor,
    UserAction,
    required_fields,
    required_state,
    traced_action,
)

# Tie-break ranks (see the module docstring). Actions that write to a queue are logged before
# the write; actions that read one are logged after the read returned.
_PUTS: frozenset[str] = frozenset(
    a.value
    for a in (
        Action.MAIN_TRY_PUT_INDEX,
        Action.MAIN_RESUME_ITERATION,
        Action.MAIN_SET_PIN_DONE,
        Action.MAIN_SET_WORKERS_DONE,
        Action.MAIN_PUT_SENTINEL,
        Action.MAIN_TERMINATE_WORKER,
        Action.WORKER_PUT,
        Action.WORKER_ACK_RESUME,
        Action.PIN_PUT_DATA,
    )
)
_GETS: frozenset[str] = frozenset(
    a.value
    for a in (
        Action.MAIN_GET_DATA,
        Action.MAIN_DRAIN_RESUME,
        Action.MAIN_DETECT_WORKER_FAILURE,
        Action.MAIN_JOIN_PIN_THREAD,
        Action.MAIN_JOIN_WORKER,
        Action.WORKER_FETCH,
        Action.WORKER_SKIP_INDEX,
        Action.WORKER_EXIT,
        Action.WORKER_WATCHDOG_EXIT,
        Action.PIN_GET_RESULT,
        Action.PIN_EXIT,
    )
)
KNOWN_ACTIONS: frozenset[str] = (
    frozenset(a.value for a in Action) | frozenset(a.value for a in UserAction) | {CONFIG_ACTION}
)
_USER: frozenset[str] = frozenset(a.value for a in UserAction)


class TraceFormatError(ValueError):
    """A log line is not a trace record; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Record:
    """One line of a trace log: one spec action taken by one process (or a config header)."""

    t: int  # time.monotonic_ns() when logged
    pid: int
    actor: str  # Main, Worker, Pin or Fault
    action: str  # an Action value, or CONFIG_ACTION
    epoch: int | None = None
    worker: int | None = None
    task: int | None = None
    kind: str | None = None
    state: dict[str, Any] | None = None
    origin: tuple[int, int, int] | None = None  # [worker, task, epoch] of the message moved
    extra: dict[str, Any] = field(default_factory=dict)  # fields this checker does not read
    source: str = ""  # "file:line", for messages
    seq: int = 0  # position in its file, the last tie-break

    def field(self, name: str) -> Any:
        """A field by its record name, whether this class reads it or keeps it in ``extra``."""
        return getattr(self, name) if name in _READ else self.extra.get(name)

    @property
    def before_its_iterator(self) -> bool:
        """A user's record that belongs to the next iterator's run: taken while no iterator of
        the loader was live (no post-state), e.g. ``load_state_dict()`` after a crash."""
        return self.action in _USER and self.state is None

    def brief(self) -> str:
        """One line for humans: the action with the parameters it was logged with."""
        params = [
            f"{name}={value}"
            for name, value in (
                ("epoch", self.epoch),
                ("worker", self.worker),
                ("task", self.task),
                ("kind", self.kind),
            )
            if value is not None
        ]
        return f"{self.action}({', '.join(params)}) by {self.actor} pid {self.pid}"

    def as_json(self) -> dict[str, Any]:
        """The record as it was logged (for writing mutated traces back)."""
        out: dict[str, Any] = {"t": self.t, "pid": self.pid, "actor": self.actor}
        out["action"] = self.action
        for name in ("epoch", "worker", "task", "kind", "state", "origin"):
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if name == "origin" else value
        out.update(self.extra)
        return out


_READ = frozenset(f.name for f in fields(Record))


def _rank(record: Record) -> int:
    if record.actor == "Fault":
        return 0
    if record.action in _PUTS:
        return 1
    if record.action in _GETS:
        return 3
    return 2


def _opt_int(obj: dict[str, Any], name: str, where: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{where}: field {name!r} must be an integer or null, not {value!r}")
    return value


def parse_line(line: str, *, where: str, seq: int = 0) -> Record:
    """One JSON line to a ``Record``.

    Raises:
        TraceFormatError: not JSON, not an object, a missing or mistyped field, or an action
            that is not in the vocabulary (``where`` names the line).
    """
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: a trace record is a JSON object")
    for name in ("t", "pid", "actor", "action"):
        if name not in obj:
            raise TraceFormatError(f"{where}: missing field {name!r}")
    action = obj["action"]
    if action not in KNOWN_ACTIONS:
        raise TraceFormatError(f"{where}: unknown action {action!r} (not in the vocabulary)")
    expected = Actor.MAIN.value if action == CONFIG_ACTION else traced_action(action).actor.value
    if obj["actor"] != expected:
        raise TraceFormatError(f"{where}: actor {obj['actor']!r} cannot take {action} ({expected})")
    if action == CONFIG_ACTION and not isinstance(obj.get("config"), dict):
        raise TraceFormatError(f"{where}: a {CONFIG_ACTION} record's 'config' must be an object")
    checkpoint = obj.get(CHECKPOINT_FIELD)
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise TraceFormatError(f"{where}: field {CHECKPOINT_FIELD!r} must be an object or null")
    t, pid = _opt_int(obj, "t", where), _opt_int(obj, "pid", where)
    if t is None or pid is None:
        raise TraceFormatError(f"{where}: 't' and 'pid' must be integers")
    state = obj.get("state")
    if state is not None and not isinstance(state, dict):
        raise TraceFormatError(f"{where}: field 'state' must be an object or null")
    kind = obj.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise TraceFormatError(f"{where}: field 'kind' must be a string or null")
    origin = obj.get("origin")
    if origin is not None and (
        not isinstance(origin, list)
        or len(origin) != 3
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in origin)
    ):
        raise TraceFormatError(f"{where}: field 'origin' must be [worker, task, epoch] or null")
    known = {"t", "pid", "actor", "action", "epoch", "worker", "task", "kind", "state", "origin"}
    return Record(
        t=t,
        pid=pid,
        actor=str(obj["actor"]),
        action=action,
        epoch=_opt_int(obj, "epoch", where),
        worker=_opt_int(obj, "worker", where),
        task=_opt_int(obj, "task", where),
        kind=kind,
        state=state,
        origin=None if origin is None else tuple(origin),
        extra={k: v for k, v in obj.items() if k not in known},
        source=where,
        seq=seq,
    )


def log_files(paths: Iterable[Path | str]) -> list[Path]:
    """The trace files named: files as given, directories expanded to their ``trace-*.jsonl``.

    Raises:
        FileNotFoundError: a path does not exist, or a directory holds no trace file.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob(TRACE_GLOB))
            if not found:
                raise FileNotFoundError(f"{path}: no {TRACE_GLOB} files in this directory")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return files


def read_file(path: Path) -> list[Record]:
    """Every record of one log file, in file order.

    A last line without its newline is a record cut off by a kill mid-write: it is dropped, as
    the process never finished logging it (and so never took the step it announced). Any other
    bad line raises.

    Raises:
        TraceFormatError: a malformed line (not the torn last one).
    """
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"{path}: not a text file (byte {exc.start} is not UTF-8): a trace log is JSON lines"
        ) from None
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline
    records = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            records.append(parse_line(line, where=f"{path}:{number}", seq=number))
    if torn.strip():
        with contextlib.suppress(TraceFormatError):  # torn by a kill: see the docstring
            records.append(parse_line(torn, where=f"{path}:{len(lines) + 1}", seq=len(lines) + 1))
    return records


def merge(records: Iterable[Record]) -> list[Record]:
    """All records in one causal order: by ``t``, ties as the module docstring says."""
    return sorted(records, key=lambda r: (r.t, _rank(r), r.pid, r.seq))


def read_logs(paths: Iterable[Path | str]) -> list[Record]:
    """Read and merge the logs of the given files and directories."""
    records: list[Record] = []
    for path in log_files(paths):
        records.extend(read_file(path))
    return merge(records)


@dataclass(frozen=True)
class IteratorTrace:
    """The merged records of one iterator: its config header and the actions after it."""

    name: str  # for messages: the directory (and the run's position when it holds several)
    config: dict[str, Any]
    records: tuple[Record, ...]


def split_runs(records: Sequence[Record], name: str) -> list[IteratorTrace]:
    """Cut a merged log at each ``Config`` header into the runs of one iterator each.

    Adjacent headers (a harness's and the loader's own) describe one iterator: merged. A user's
    record taken while no iterator was live (``Record.before_its_iterator``: a load after a
    crash, a ``state_dict()`` before ``iter()``) belongs to the next iterator, the one it
    governs: it opens that run. Such records after the last header govern no run and are left
    out.

    Raises:
        TraceFormatError: actions logged before the first header (the log lost its start).
    """
    runs: list[IteratorTrace] = []
    config: dict[str, Any] | None = None
    current: list[Record] = []
    prefix: list[Record] = []  # the current run's user records from before its header
    waiting: list[Record] = []  # user records for the next header
    # A worker can log a fault before the header that names it: the header carries the workers'
    # pids, so the main process writes it once they are started, while a worker may already be
    # running its worker_init_fn (where an injected start-up error is logged). Such a record
    # waits for the header naming its pid.
    named = {pid for r in records if r.action == CONFIG_ACTION for pid in _worker_pids(r)}
    headed: set[int] = set()  # the worker pids of the headers so far
    early: list[Record] = []

    def close(label: str) -> None:
        assert config is not None
        runs.append(IteratorTrace(label, config, tuple(prefix + normalise(current, config))))

    for record in records:
        if record.action == CONFIG_ACTION:
            header = dict(record.extra.get("config", {}))
            if config is not None and not current and not waiting:
                config = {**config, **header}  # two headers of one iterator (harness, loader)
            else:
                if config is not None:
                    close(f"{name}#{len(runs)}")
                config, current, prefix, waiting = header, [], waiting, []
            pids = set(_worker_pids(record))
            headed |= pids
            current += [r for r in early if r.pid in pids]
            early = [r for r in early if r.pid not in pids]
        elif record.before_its_iterator:
            waiting.append(record)
        elif record.actor == Actor.FAULT.value and record.pid in named and record.pid not in headed:
            early.append(record)
        elif config is None:
            raise TraceFormatError(
                f"{record.source}: {record.brief()} comes before any {CONFIG_ACTION!r} record"
                " (the log lost its start, or the loader does not log its config)"
            )
        else:
            current.append(record)
    if config is not None:
        close(f"{name}#{len(runs)}" if runs else name)
    return runs


def _worker_pids(header: Record) -> list[int]:
    pids = header.extra.get("config", {}).get("worker_pids") or []
    return [pid for pid in pids if isinstance(pid, int)]


def normalise(records: Sequence[Record], config: dict[str, Any] | None = None) -> list[Record]:
    """Make one run's records one record per spec step (both rules are documented in
    docs/tracecheck.md):

    * A Worker record without ``worker`` (e.g. a watchdog exit) gets the worker id of its pid:
      from the header's ``worker_pids``, else from the same process's other records; a Fault
      record without ``worker`` gets that of its ``victim`` pid (a kill by pid).
    * A ``FaultFetchError`` announcing the error its worker's next ``WorkerFetch`` reports is
      dropped (``_drop_announced_errors``).
    * ``MainResumeIteration`` is one spec step that sends a resume to every worker; a loader
      may log it once per worker. A record of it that follows another one of the same epoch,
      with no main-process record between them, is the same step and is dropped.
    """
    pids = (config or {}).get("worker_pids") or []
    worker_of: dict[int, int] = {pid: w for w, pid in enumerate(pids) if isinstance(pid, int)}
    for record in records:
        if record.actor == "Worker" and record.worker is not None:
            worker_of.setdefault(record.pid, record.worker)
    out: list[Record] = []
    last_main: dict[int, Record] = {}
    records = _drop_announced_errors(records)
    for record in records:
        if record.actor == "Worker" and record.worker is None and record.pid in worker_of:
            record = replace(record, worker=worker_of[record.pid])
        victim = record.extra.get("victim")
        if record.actor == "Fault" and record.worker is None and victim in worker_of:
            record = replace(record, worker=worker_of[victim])
        if record.actor == "Main":
            previous = last_main.get(record.pid)
            last_main[record.pid] = record
            if (
                record.action == "MainResumeIteration"
                and previous is not None
                and previous.action == "MainResumeIteration"
                and previous.epoch == record.epoch
            ):
                continue
        out.append(record)
    return out


def check_record_fields(run: IteratorTrace) -> None:
    """Every record of the run has the fields its action requires (the vocabulary's schema,
    ``loaderspec.vocabulary.required_fields``): a stripped record proves nothing.

    Raises:
        TraceFormatError: the first record missing one, naming the field and the record.
    """
    for record in run.records:
        action = traced_action(record.action)
        missing = [name for name in required_fields(action) if record.field(name) is None]
        state = record.state or {}
        missing += [f"state.{key}" for key in required_state(action) if key not in state]
        if missing:
            raise TraceFormatError(
                f"{record.source}: {record.brief()} lacks {', '.join(missing)}: a"
                f" {record.action} record must carry {', '.join(required_fields(action))}"
                " (docs/tracecheck.md, the record schema); log them, or drop the run"
            )


def _drop_announced_errors(records: Sequence[Record]) -> list[Record]:
    """A ``FaultFetchError`` of worker w whose next record of w is w's ``WorkerFetch`` of kind
    "error" is that fetch's error announced: the worker's record takes the spec step, the fault
    record adds nothing. Dropped, since it may come long before the fetch (an error raised in
    ``worker_init_fn`` is the result of the worker's first task)."""
    out = []
    for i, record in enumerate(records):
        if record.action == Action.FAULT_FETCH_ERROR.value and record.worker is not None:
            after = (r for r in records[i + 1 :] if r.worker == record.worker and r.actor != "Main")
            following = next(after, None)
            if (
                following is not None
                and following.action == Action.WORKER_FETCH.value
                and following.kind == "error"
            ):
                continue
        out.append(record)
    return out


def write_log(records: Iterable[Record], directory: Path) -> list[Path]:
    """Write records back as per-pid logs (for mutated traces in tests); returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    by_pid: dict[int, list[Record]] = {}
    for record in records:
        by_pid.setdefault(record.pid, []).append(record)
    files = []
    for pid, recs in by_pid.items():
        path = directory / TRACE_FILE.format(pid=pid)
        path.write_text("".join(json.dumps(r.as_json()) + "\n" for r in recs))
        files.append(path)
    return files


def iter_dirs(paths: Iterable[Path | str]) -> Iterator[tuple[str, list[Path]]]:
    """Each argument as one log: a directory's files together, a lone file on its own."""
    for raw in paths:
        path = Path(raw)
        yield str(path), log_files([path])
