"""``loaderspec model-check``: check the spec's models with TLC against ``spec/models.toml``.

This module owns the manifest (which models exist, in which tier, what TLC must find) and the
readable counterexample. How TLC is started and read is ``loaderspec.tlc``; TLC's own
distributed mode (a TLCServer and TLCWorkers, ``run_distributed``) lives here because it is only
another way to start the same jar on the same models.

Exit status of a tier (``--tier``): 0 when every model gave its expected result, 1 when one did
not. Of one model (``--config``): TLC's verdict, 0 only when TLC found no violation and none was
expected, so a broken variant exits 1 with its counterexample printed (the summary line says
whether that violation was the manifest's ``expect``). 2 on a usage error (an unknown config, no
TLC).
"""

from __future__ import annotations

import argparse
import importlib.resources
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderspec import tlc

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser.
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

TIERS = ("quick", "nightly", "broken")
PASS = "pass"
DEADLOCK_PROPERTY = "NoDeadlock"  # TLC's "Deadlock reached" is this vocabulary property


@dataclass(frozen=True)
class Model:
    """One table of ``spec/models.toml``."""

    name: str
    spec: Path
    cfg: Path
    tier: str
    expect: str  # "pass" or the property TLC must report violated
    args: tuple[str, ...] = ()
    states: int | None = None  # distinct states last recorded
    seconds: float | None = None  # wall time last recorded (a loaded 2-core machine)
    cpu_seconds: float | None = None  # TLC's CPU time last recorded: ~ wall time when idle
    fast_start: bool = True  # small model: start the JVM with C1 only (tlc.FAST_START)


@dataclass(frozen=True)
class Outcome:
    """A model, what TLC found, and whether that was the expected result."""

    model: Model
    result: tlc.TlcResult
    found: str  # "pass", a property name, or tlc's TLCError / Timeout

    @property
    def as_expected(self) -> bool:
        return self.found == self.model.expect


def spec_dir() -> Path:
    """``spec/`` of the checkout, or ``loaderspec/spec`` of an installed wheel."""
    return Path(str(importlib.resources.files("loaderspec.spec")))


def load_manifest(path: Path | None = None) -> list[Model]:
    """Every model of the manifest, in file order; paths resolved against its folder.

    Raises:
        ValueError: a table lacks ``cfg``/``tier``/``expect`` or names an unknown tier.
    """
    path = path or spec_dir() / "models.toml"
    data = tomllib.loads(path.read_text())
    models = []
    for name, table in data.items():
        missing = {"cfg", "tier", "expect"} - set(table)
        if missing:
            raise ValueError(f"{path}: model {name} lacks {', '.join(sorted(missing))}")
        if table["tier"] not in TIERS:
            raise ValueError(f"{path}: model {name} has tier {table['tier']!r}; use {TIERS}")
        models.append(
            Model(
                name=name,
                spec=(path.parent / table.get("spec", "DataLoader.tla")).resolve(),
                cfg=(path.parent / table["cfg"]).resolve(),
                tier=table["tier"],
                expect=table["expect"],
                args=tuple(table.get("args", ())),
                states=table.get("states"),
                seconds=table.get("seconds"),
                cpu_seconds=table.get("cpu_seconds"),
                fast_start=table.get("fast_start", True),
            )
        )
    return models


def found_name(result: tlc.TlcResult) -> str:
    """The result in the manifest's terms: ``pass``, a property name, or a TLC failure."""
    if result.ok:
        return PASS
    if result.violated == tlc.DEADLOCK:
        return DEADLOCK_PROPERTY
    return result.violated or tlc.TLC_ERROR


def check_model(
    model: Model,
    *,
    workers: int = 1,
    timeout_s: float = 900.0,
    distributed: int = 0,
) -> Outcome:
    """Run TLC on one model (``distributed``: that many TLCWorker processes on localhost)."""
    jvm = tlc.FAST_START if model.fast_start else ()
    if distributed:
        result = run_distributed(
            model.spec,
            model.cfg,
            tlc_workers=distributed,
            extra_args=model.args,
            timeout_s=timeout_s,
            jvm_args=jvm,
        )
    else:
        result = tlc.run_tlc(
            model.spec,
            model.cfg,
            extra_args=model.args,
            workers=workers,
            timeout_s=timeout_s,
            jvm_args=jvm,
        )
    return Outcome(model, result, found_name(result))


def record_figures(outcomes: Sequence[Outcome], path: Path | None = None) -> None:
    """Write each outcome's distinct states, seconds and CPU seconds into its manifest table.

    A line-based edit, so the manifest's comments and order stay as they are.
    """
    path = path or spec_dir() / "models.toml"
    figures = {
        o.model.name: (o.result.distinct, round(o.result.seconds, 1), o.result.cpu_seconds)
        for o in outcomes
    }
    out: list[str] = []
    table: str | None = None

    def flush() -> None:
        if table in figures:
            states, seconds, cpu = figures.pop(table)
            while out and not out[-1].strip():
                out.pop()
            out.extend([f"states = {states}", f"seconds = {seconds}"])
            out.extend([f"cpu_seconds = {cpu}"] if cpu is not None else [])
            out.append("")

    for line in path.read_text().splitlines():
        header = re.match(r"^\[(\w+)\]\s*$", line)
        if header or line.startswith("# ---"):
            flush()
            table = header.group(1) if header else None
        elif table in figures and re.match(r"^(states|seconds|cpu_seconds)\s*=", line):
            continue
        out.append(line)
    flush()
    path.write_text("\n".join(out).rstrip("\n") + "\n")


# --- the readable counterexample --------------------------------------------------------------


def format_counterexample(trace: Sequence[tlc.TraceState]) -> str:
    """One line per step: its number, the action, and each variable it changed (old -> new).

    The initial state is printed in full, one variable a line; a lasso's end says where the
    behaviour loops back to, and a final stuttering step says the run stops there for ever.
    """
    lines: list[str] = []
    previous: dict[str, Any] = {}
    for state in trace:
        if state.stuttering:
            lines.append(f"{state.number:>4}  (stuttering: nothing happens any more)")
            continue
        if state.back_to is not None:
            lines.append(f"{state.number:>4}  (back to state {state.back_to}: loops for ever)")
            continue
        values = {name: _parse_or_text(text) for name, text in state.values.items()}
        if state.action is None:
            lines.append(f"{state.number:>4}  Init")
            lines.extend(f"        {name} = {tlc.format_value(v)}" for name, v in values.items())
        else:
            changes = [
                change
                for name, value in values.items()
                for change in tlc.diff_values(name, previous.get(name), value)
            ]
            lines.append(f"{state.number:>4}  {state.action}: " + ("; ".join(changes) or "-"))
        previous = values
    return "\n".join(lines)


def _parse_or_text(text: str) -> Any:
    """The parsed value, or the raw text where TLC printed something we do not read."""
    try:
        return tlc.parse_value(text)
    except (ValueError, IndexError):
        return tlc.ModelValue(text)


# --- TLC's distributed mode ---------------------------------------------------------------------


def _free_port() -> int:
    """A port nobody listens on now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _lines(stream: Any, out: queue.Queue[str | None]) -> None:
    """Copy a process's output into a queue, line by line; None at the end."""
    for line in stream:
        out.put(line)
    out.put(None)


def run_distributed(
    spec: Path,
    cfg: Path,
    *,
    tlc_workers: int = 1,
    host: str = "localhost",
    extra_args: Sequence[str] = (),
    timeout_s: float = 900.0,
    jvm_args: Sequence[str] = (),
) -> tlc.TlcResult:
    """Check a model with TLC's own distributed mode: one TLCServer, ``tlc_workers`` TLCWorkers.

    The workers run here on ``host`` (a model past one machine starts more of them elsewhere,
    pointing at this server). TLC 2.15's workers fetch the config by its bare name from the
    spec's folder, so the run happens in a temporary flat copy of the spec's modules. Every
    process started is waited for within the deadline and killed by PID otherwise.
    """
    deadline = time.monotonic() + timeout_s
    port = _free_port()
    port_prop = f"-Dtlc2.tool.distributed.TLCServer.port={port}"
    jar = tlc.tla2tools_jar()
    procs: list[subprocess.Popen[str]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loaderspec-tlcdist-") as tmp:
        for module in spec.parent.glob("*.tla"):
            shutil.copy(module, tmp)
        shutil.copy(cfg, Path(tmp) / cfg.name)
        jvm = [*jvm_args, port_prop]
        server_cmd = [
            *tlc.java_command("tlc2.tool.distributed.TLCServer", jar, tmp, jvm),
            *("-metadir", str(Path(tmp) / "states"), "-config", cfg.name),
            *extra_args,
            spec.name,
        ]
        try:
            server = subprocess.Popen(
                server_cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            procs.append(server)
            lines: queue.Queue[str | None] = queue.Queue()
            threading.Thread(target=_lines, args=(server.stdout, lines), daemon=True).start()
            output = _until_ready(lines, deadline)
            if "is ready" in output:
                worker_cmd = tlc.java_command("tlc2.tool.distributed.TLCWorker", jar, tmp, jvm)
                for _ in range(tlc_workers):
                    procs.append(
                        subprocess.Popen(
                            [*worker_cmd, host],
                            cwd=tmp,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            text=True,
                        )
                    )
            output += _drain(lines, deadline)
            timed_out = time.monotonic() >= deadline
            _reap(procs, deadline)
        finally:
            for proc in procs:  # only the processes started here, by PID
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
    seconds = time.monotonic() - started
    if timed_out:
        return tlc.TlcResult(False, tlc.TIMED_OUT, [], None, None, seconds, output, None)
    parsed = tlc.parse_output(output, server.returncode, cfg)
    return tlc.TlcResult(
        parsed.ok,
        parsed.violated,
        parsed.trace,
        parsed.states_found,
        parsed.distinct,
        seconds,
        output,
        server.returncode,
    )


def _until_ready(lines: queue.Queue[str | None], deadline: float) -> str:
    """The server's output up to its "ready" line (or its end, or the deadline)."""
    out: list[str] = []
    for line in _read(lines, deadline):
        out.append(line)
        if "is ready" in line:
            break
    return "".join(out)


def _drain(lines: queue.Queue[str | None], deadline: float) -> str:
    return "".join(_read(lines, deadline))


def _read(lines: queue.Queue[str | None], deadline: float) -> Iterator[str]:
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return
        if line is None:
            return
        yield line


def _reap(procs: list[subprocess.Popen[str]], deadline: float) -> None:
    """Wait for each process until the deadline (workers end when their server does)."""
    for proc in procs:
        left = max(0.0, deadline - time.monotonic())
        try:
            proc.wait(timeout=max(left, 1.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


# --- the command ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``loaderspec model-check``."""
    parser.add_argument(
        "--tier",
        choices=TIERS,
        default="quick",
        help="the manifest's models of this tier (default: quick)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="check this .cfg only (its manifest entry gives spec, args and expected result);"
        " exit 1 on any violation, printing the counterexample",
    )
    parser.add_argument(
        "--spec", type=Path, metavar="FILE", help="the module for --config (default: manifest's)"
    )
    parser.add_argument(
        "--expect",
        metavar="RESULT",
        help="with --config: 'pass' or the property TLC must report (default: manifest's)",
    )
    parser.add_argument(
        "--workers", type=int, default=1, metavar="N", help="TLC worker threads (default 1)"
    )
    parser.add_argument(
        "--distributed",
        type=int,
        default=0,
        metavar="N",
        help="use TLC's distributed mode: a TLCServer and N TLCWorkers on localhost",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, metavar="S", help="per model (default 900)"
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the state counts and seconds found into spec/models.toml",
    )
    parser.add_argument(
        "--traces",
        action="store_true",
        help="print the counterexample of expected violations too",
    )


def _select(args: argparse.Namespace) -> list[Model]:
    """The models to check; raises ValueError with a usage message."""
    manifest = load_manifest()
    if args.config is None:
        return [m for m in manifest if m.tier == args.tier]
    cfg = args.config.resolve()
    if not cfg.is_file():
        raise ValueError(f"--config {args.config}: no such file")
    listed = next((m for m in manifest if m.cfg == cfg), None)
    spec = args.spec.resolve() if args.spec else None
    if listed is None:
        listed = Model(cfg.stem, spec or spec_dir() / "DataLoader.tla", cfg, "adhoc", PASS)
    return [
        Model(
            listed.name,
            spec or listed.spec,
            cfg,
            listed.tier,
            args.expect or listed.expect,
            listed.args,
            listed.states,
            listed.seconds,
            listed.fast_start,
        )
    ]


def run(args: argparse.Namespace) -> int:
    """Check the selected models; print one line each and any unexpected counterexample."""
    try:
        models = _select(args)
    except (ValueError, OSError) as exc:
        print(f"loaderspec model-check: {exc}", file=sys.stderr)
        return 2
    single = args.config is not None
    failures = 0
    total = cpu = 0.0
    outcomes: list[Outcome] = []
    for model in models:
        try:
            outcome = check_model(
                model, workers=args.workers, timeout_s=args.timeout, distributed=args.distributed
            )
        except tlc.TlcNotFound as exc:
            print(f"loaderspec model-check: {exc}", file=sys.stderr)
            return 2
        total += outcome.result.seconds
        cpu += outcome.result.cpu_seconds or 0.0
        outcomes.append(outcome)
        print(_summary(outcome), flush=True)
        if not outcome.as_expected:
            failures += 1
        if outcome.result.trace and (single or args.traces or not outcome.as_expected):
            print(f"counterexample ({outcome.found}):")
            print(format_counterexample(outcome.result.trace))
        if outcome.found in (tlc.TLC_ERROR, tlc.TIMED_OUT):
            print(_tail(outcome.result.output))
    print(
        f"{len(models) - failures}/{len(models)} as expected in {total:.1f} s"
        + (f" ({cpu:.1f} s CPU)" if cpu else ""),
        flush=True,
    )
    if args.record:
        record_figures([o for o in outcomes if o.as_expected])
    if single:  # one model: TLC's verdict, so a violation is never exit status 0
        return 0 if outcomes[0].found == PASS and outcomes[0].as_expected else 1
    return 1 if failures else 0


def _summary(outcome: Outcome) -> str:
    verdict = "ok  " if outcome.as_expected else "FAIL"
    result = outcome.result
    got = outcome.found if outcome.found == PASS else f"violates {outcome.found}"
    want = outcome.model.expect if outcome.model.expect == PASS else f"{outcome.model.expect}"
    return (
        f"{verdict} {outcome.model.name}: {got} (expected {want}); "
        f"{result.distinct} distinct states, {result.seconds:.1f} s"
        + (f" ({result.cpu_seconds:.1f} s CPU)" if result.cpu_seconds is not None else "")
    )


def _tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.splitlines()[-lines:])
