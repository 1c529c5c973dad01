"""``loaderspec model-check``: check the spec's models with TLC against ``spec/models.toml``.

What a model is and its generated config are ``loaderspec.manifest``; how TLC is started and
read is ``loaderspec.tlc``. This module runs the tiers, records their figures, and prints the
readable counterexample; TLC's own distributed mode (a TLCServer and TLCWorkers,
``run_distributed``) lives here because it is only another way to start the same jar on the
same models.

A model either passes (``expect = "pass"``) or is a broken variant that lists the full set of
properties TLC finds it violating (``violates = [...]``); ``--tier broken`` checks that set
exactly (``loaderspec.variantcheck``). Exit status of a tier (``--tier``): 0 when every model
gave its expected result, 1 when one did not. Of one model (``--model`` or ``--config``): TLC's
verdict, 0 only when TLC found no violation and none was expected, so a broken variant exits 1
with its first counterexample printed (the summary line says whether that violation is one the
manifest lists). 2 on a usage error: an unknown model or config, no TLC, a config TLC cannot use
(an undefined invariant or property, a constant without a value, an empty file: one line naming
it and the fix), ``--record`` outside a checkout.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loaderspec import tlc, variantcheck
from loaderspec.cliargs import positive_int, positive_seconds, whole_number
from loaderspec.manifest import (
    BASE_SPEC,
    FIGURES,
    PASS,
    TIERS,
    UNAFFORDABLE,
    Model,
    coverage,
    coverage_table,
    load_manifest,
    spec_dir,
    variant_shapes,
    variant_table,
)
from loaderspec.tlavalues import Function, ModelValue, NotParsable, TlaRecord, encode, parse

DEADLOCK_PROPERTY = "NoDeadlock"  # TLC's "Deadlock reached" is this vocabulary property


@dataclass(frozen=True)
class ModelOutcome:
    """A model, what one TLC run found, and whether that was an expected result."""

    model: Model
    result: tlc.TlcResult
    found: str  # "pass", a property name, or tlc's TLCError / Timeout

    @property
    def as_expected(self) -> bool:
        if not self.model.violates:
            return self.found == PASS
        return self.found in self.model.violates


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
    workers: int | None = None,
    timeout_s: float = 900.0,
    distributed: int = 0,
) -> ModelOutcome:
    """Run TLC on one model with ``workers`` threads (default: the manifest's ``workers``;
    ``distributed``: that many TLCWorker processes on localhost instead)."""
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
            workers=workers or model.workers,
            timeout_s=timeout_s,
            jvm_args=jvm,
        )
    return ModelOutcome(model, result, found_name(result))


def record_figures(
    figures: dict[str, tlc.TlcResult], path: Path | None = None, *, seconds: dict[str, float]
) -> None:
    """Write each model's distinct states, total states, depth, seconds and CPU seconds (from
    the TLC run that explored its whole graph) into its manifest table; ``seconds`` is the wall
    time of all of the model's runs.

    A line-based edit, so the manifest's comments and order stay as they are.
    """
    path = path or spec_dir() / "models.toml"
    values = {
        name: {
            "states": r.distinct,
            "total_states": r.states_found,
            "depth": r.depth,
            "seconds": round(seconds[name], 1),
            "cpu_seconds": r.cpu_seconds,
        }
        for name, r in figures.items()
    }
    out: list[str] = []
    table: str | None = None

    def flush() -> None:
        if table in values:
            row = values.pop(table)
            # The blank and comment lines before the next table are that table's.
            end = len(out)
            while end and (not out[end - 1].strip() or out[end - 1].startswith("#")):
                end -= 1
            figures = [f"{k} = {v}" for k in FIGURES if (v := row[k]) is not None]
            out[end:end] = figures

    figure_line = re.compile(rf"^({'|'.join(FIGURES)})\s*=")
    for line in path.read_text().splitlines():
        header = re.match(r"^\[(\w+)\]\s*$", line)
        if header:
            flush()
            table = header.group(1)
        elif table in values and figure_line.match(line):
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
            lines.extend(f"        {name} = {encode(v)}" for name, v in values.items())
        else:
            changes = [
                change
                for name, value in values.items()
                for change in diff_values(name, previous.get(name), value)
            ]
            lines.append(f"{state.number:>4}  {state.action}: " + ("; ".join(changes) or "-"))
        previous = values
    return "\n".join(lines)


def _parse_or_text(text: str) -> Any:
    """The parsed value, or the raw text where TLC printed something we do not read."""
    try:
        return parse(text)
    except NotParsable:
        return ModelValue(text)


def diff_values(path: str, old: Any, new: Any) -> list[str]:
    """What changed from ``old`` to ``new``, one phrase per changed leaf.

    Records and functions are entered (``worker_state[1]``, ``pin_msg.kind``); a sequence that
    grew by one element at the end or lost its head reads ``append x`` / ``pop x``.
    """
    if old == new:
        return []
    # TLC prints a function whose domain is 1..n as a sequence, and an empty one as <<>>.
    if isinstance(old, tuple) and isinstance(new, Function):
        old = Function(enumerate(old, start=1))
    elif isinstance(new, tuple) and isinstance(old, Function):
        new = Function(enumerate(new, start=1))
    if isinstance(old, dict) and isinstance(new, dict) and type(old) is type(new):
        changes: list[str] = []
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{path}.{key}" if isinstance(old, TlaRecord) else f"{path}[{encode(key)}]"
            if key not in new:
                changes.append(f"{sub} removed")
            elif key not in old:
                changes.append(f"{sub} = {encode(new[key])}")
            else:
                changes.extend(diff_values(sub, old[key], new[key]))
        return changes
    if isinstance(old, tuple) and isinstance(new, tuple):
        if len(new) == len(old) + 1 and new[:-1] == old:
            return [f"{path}: append {encode(new[-1])}"]
        if len(old) == len(new) + 1 and old[1:] == new:
            return [f"{path}: pop {encode(old[0])}"]
    return [f"{path}: {encode(old)} -> {encode(new)}"]


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
    return replace(tlc.parse_output(output, server.returncode, cfg), seconds=seconds)


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
    one = parser.add_mutually_exclusive_group()
    one.add_argument(
        "--model",
        metavar="NAME",
        help="check this model of the manifest only (e.g. BrokenPrefetchBound);"
        " exit 1 on any violation, printing the counterexample",
    )
    one.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="check your own .cfg only (it is expected to pass); exit 1 on any violation,"
        " printing the counterexample",
    )
    parser.add_argument(
        "--spec",
        type=Path,
        metavar="FILE",
        help="the module for --model or --config (default: the manifest's, else DataLoader.tla)",
    )
    parser.add_argument(
        "--expect",
        metavar="RESULT",
        help="with --model or --config: 'pass' or the property TLC must report"
        " (default: the manifest's)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="TLC worker threads, 1 or more (default: the model's `workers` in the manifest,"
        " else 1)",
    )
    parser.add_argument(
        "--distributed",
        type=_tlc_workers,
        default=0,
        metavar="N",
        help="use TLC's distributed mode: a TLCServer and N TLCWorkers on localhost (0: not)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=900.0,
        metavar="S",
        help="seconds per model, more than 0 and at most 86400 (default 900)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write the state counts and seconds found into spec/models.toml (in a checkout)",
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="print which models hold each pair of factors (docs/spec.md's coverage statement)"
        " and exit: 0 when every pair a model can hold is held",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="print, for each broken variant, the quick and nightly models that hold its shape"
        " (docs/spec.md's variants statement) and exit: 0 when the quick tier holds every"
        " variant's shape",
    )
    parser.add_argument(
        "--traces",
        action="store_true",
        help="print the counterexample of expected violations too",
    )


def _tlc_workers(text: str) -> int:
    """``--distributed``: how many TLCWorkers, 0 (not distributed) or more."""
    return whole_number(text, 0, "--distributed 2")


MSG_RECORD_INSTALLED = (
    "--record writes the figures into the checkout's spec/models.toml, but this loaderspec is "
    "installed ({where}), not a checkout: run it from a checkout (pip install -e /path/to/it)"
)


def _in_checkout() -> bool:
    """Whether the spec is a checkout's (spec/ beside pyproject.toml), not an installed wheel's."""
    return (spec_dir().resolve().parent / "pyproject.toml").is_file()


def _select(args: argparse.Namespace) -> list[Model]:
    """The models to check; raises ValueError with a usage message."""
    manifest = load_manifest()
    spec = args.spec.resolve() if args.spec else None
    if args.model is not None:
        listed = next((m for m in manifest if m.name == args.model), None)
        if listed is None:
            names = ", ".join(m.name for m in manifest)
            raise ValueError(f"--model {args.model}: no such model in the manifest; one of {names}")
    elif args.config is not None:
        cfg = args.config.resolve()
        parts = args.config.parts
        shipped = spec_dir() / Path(*parts[1:]) if parts[:1] == ("spec",) else None
        if not cfg.is_file() and shipped is not None and shipped.is_file():
            cfg = shipped  # spec/... from a wheel: the spec ships inside loaderspec (issue 21)
        if not cfg.is_file():
            raise ValueError(
                f"--config {args.config}: no such file (the spec's own modules: {spec_dir()};"
                " a model of the manifest: --model NAME)"
            )
        # A generated cfg of build/models is its model's; any other is the user's own.
        listed = next((m for m in manifest if m.cfg == cfg), None) or Model(
            cfg.stem, spec or spec_dir() / BASE_SPEC, cfg, "adhoc"
        )
    else:
        return [m for m in manifest if m.tier == args.tier]
    violates = listed.violates
    if args.expect is not None:
        violates = frozenset() if args.expect == PASS else frozenset({args.expect})
    return [replace(listed, spec=spec or listed.spec, violates=violates)]


def run(args: argparse.Namespace) -> int:
    """Check the selected models; print one line each and any unexpected counterexample."""
    if args.coverage:
        manifest = load_manifest()
        print(coverage_table(manifest), end="")
        held = coverage(manifest)
        return 0 if all(v for p, v in held.items() if p not in UNAFFORDABLE) else 1
    if args.variants:
        manifest = load_manifest()
        print(variant_table(manifest), end="")
        return 0 if all(tiers["quick"] for tiers in variant_shapes(manifest).values()) else 1
    if args.record and not _in_checkout():
        print(
            f"loaderspec model-check: {MSG_RECORD_INSTALLED.format(where=spec_dir())}",
            file=sys.stderr,
        )
        return 2
    try:
        models = _select(args)
    except (ValueError, OSError) as exc:
        print(f"loaderspec model-check: {exc}", file=sys.stderr)
        return 2
    single = args.config is not None or args.model is not None
    failures = 0
    total = cpu = 0.0
    graphs: dict[str, tlc.TlcResult] = {}  # the models run as expected, for --record
    seconds: dict[str, float] = {}
    last: ModelOutcome | None = None
    for model in models:
        try:
            if not single and model.violates:  # a broken variant: its whole set, exactly
                variant = variantcheck.check_variant(model, timeout_s=args.timeout)
                print(_variant_summary(variant), flush=True)
                ok, result, secs = variant.as_expected, variant.graph, variant.seconds
                cpu += variant.cpu_seconds
            else:
                last = check_model(
                    model,
                    workers=args.workers,
                    timeout_s=args.timeout,
                    distributed=args.distributed,
                )
                why = tlc.problem(last.result.output, model.cfg, spec_dir())
                if last.result.violated == tlc.TLC_ERROR and why:
                    # A config TLC cannot use checked nothing: a usage error, not a violation.
                    print(f"loaderspec model-check: error: {why}", file=sys.stderr)
                    return 2
                print(_summary(last), flush=True)
                ok, result, secs = last.as_expected, last.result, last.result.seconds
                cpu += result.cpu_seconds or 0.0
                if result.trace and (single or args.traces or not ok):
                    print(f"counterexample ({last.found}):")
                    print(format_counterexample(result.trace))
        except tlc.TlcNotFound as exc:
            print(f"loaderspec model-check: {exc}", file=sys.stderr)
            return 2
        total += secs
        if ok:
            graphs[model.name], seconds[model.name] = result, secs
        else:
            failures += 1
        if result.violated in (tlc.TLC_ERROR, tlc.TIMED_OUT):
            print(_tail(result.output))
    print(
        f"{len(models) - failures}/{len(models)} as expected in {total:.1f} s"
        + (f" ({cpu:.1f} s CPU)" if cpu else ""),
        flush=True,
    )
    if args.record:
        record_figures(graphs, seconds=seconds)
    if single:  # one model: TLC's verdict, so a violation is never exit status 0
        assert last is not None
        return 0 if last.found == PASS and last.as_expected else 1
    return 1 if failures else 0


def _variant_summary(variant: variantcheck.VariantOutcome) -> str:
    verdict = "ok  " if variant.as_expected else "FAIL"
    found = ", ".join(sorted(variant.found)) or "nothing"
    graph = variant.graph
    return (
        f"{verdict} {variant.model.name}: violates {found} (expected {variant.model.expect});"
        f" {graph.distinct} distinct states, {variant.seconds:.1f} s"
        f" ({variant.cpu_seconds:.1f} s CPU, {len(variant.runs)} TLC runs)"
    )


def _summary(outcome: ModelOutcome) -> str:
    verdict = "ok  " if outcome.as_expected else "FAIL"
    result = outcome.result
    got = outcome.found if outcome.found == PASS else f"violates {outcome.found}"
    want = outcome.model.expect if outcome.model.expect == PASS else f"{outcome.model.expect}"
    states = (
        "no states checked" if result.distinct is None else f"{result.distinct} distinct states"
    )
    return (
        f"{verdict} {outcome.model.name}: {got} (expected {want}); "
        f"{states}, {result.seconds:.1f} s"
        + (f" ({result.cpu_seconds:.1f} s CPU)" if result.cpu_seconds is not None else "")
    )


def _tail(output: str, lines: int = 25) -> str:
    return "\n".join(output.splitlines()[-lines:])
