"""Compile merged trace runs into a TLC model: a generated module and its config.

Owns the generated side of trace validation: which constants of ``spec/DataLoader.tla`` a run's
``Config`` header sets, the sequence-literal module that carries the runs to TLC (the 2020 jar
has no ``Json`` module), and the ``.cfg`` that checks them with ``spec/TraceDataLoader.tla``.
Everything is written into a directory the caller owns (a temporary one), never into ``spec/``.
Must not run TLC (``loaderspec.tracecheck`` does) nor read log files (``loaderspec.traces``).

Several runs with the same constants go into one module: ``TraceLogs`` is a sequence of runs and
the trace spec's ``TraceInit`` picks the run (variable ``tr``), so one JVM checks a whole batch.
The generated module is ``TraceLog`` (``spec/TraceLog.tla`` is its empty placeholder), extended by
the trace spec: a zero-arity definition that TLC evaluates once. (Substituting a CONSTANT with
``TraceLogs <- Def`` in the cfg makes TLC rebuild the literal on every access: 30 runs took
146 s that way and 10 s this way.)
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderspec.manifest import default_constants, spec_dir
from loaderspec.tlavalues import encode
from loaderspec.traces import IteratorTrace, Record
from loaderspec.vocabulary import CHECKPOINT_FIELDS, CONFIG_CONSTANT, CONFIG_START

TRACE_SPEC = "TraceDataLoader"
BASE_SPEC = "DataLoader"
LOG_MODULE = "TraceLog"
# The fields of a record the trace spec reads; everything else stays in Python.
RECORD_FIELDS = (
    "action",
    "actor",
    "epoch",
    "worker",
    "task",
    "kind",
    "state",
    "origin",
    "user",
    "checkpoint",
)
# The trace spec's refinement property: every step it takes is a step of DataLoader's Next.
SPEC_STEP = "SpecStep"
FAULT_SWITCH = "With"  # the prefix of the constants that switch a fault (or the timeout) on


class TraceConfigError(ValueError):
    """A run's ``Config`` header cannot be turned into the spec's constants."""


@dataclass(frozen=True)
class Constants:
    """The values of the base spec's constants for one run (the key of a batch)."""

    values: tuple[tuple[str, str], ...]  # (constant, TLA+ value), in cfg order

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)


def _bool(config: dict[str, Any], key: str, default: bool = False) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise TraceConfigError(f"config field {key!r} must be true or false, not {value!r}")
    return value


def _int(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceConfigError(f"config field {key!r} must be an integer, not {value!r}")
    return value


# Runs share a TLC call when their constants agree, so the constants that only bound what a
# trace may do (never what it must do) are rounded up to a few values.
ITERABLE_TASK_BUCKET = 16  # IterableDataset runs: NumTasks rounded up to a multiple of this
PERSISTENT_EPOCHS = 3  # persistent runs: NumEpochs at least this


def constants_for(run: IteratorTrace) -> Constants:
    """The base spec's constants for a run: read off its ``Config`` header and its records.

    ``NumTasks`` is the sampler's length when the header gives it. An IterableDataset's sampler
    is unbounded: then it is at least two more than the highest task index the run dispatched,
    so every task fits and the sampler is never empty (StopIteration needs every worker
    retired, as with torch's infinite sampler), rounded up to ``ITERABLE_TASK_BUCKET``.
    ``NumEpochs`` is 1 without persistent workers (each iterator is its own run), else the
    epochs the run reached, at least ``PERSISTENT_EPOCHS``: the user, not the loader, starts
    an epoch, so a larger bound allows nothing the log does not show. Every fault switch is
    on: a fault only happens if it was logged. Result channels are unbounded (a worker logs
    its put before the write that may block).

    Raises:
        TraceConfigError: a missing or mistyped header field.
    """
    cfg = run.config
    tasks = [r.task for r in run.records if r.task is not None]
    epochs = [r.epoch for r in run.records if r.epoch is not None]
    num_tasks = cfg.get("num_tasks")
    if num_tasks is None:
        needed = max(tasks, default=-1) + 2
        num_tasks = -(-needed // ITERABLE_TASK_BUCKET) * ITERABLE_TASK_BUCKET
    elif isinstance(num_tasks, bool) or not isinstance(num_tasks, int):
        raise TraceConfigError(f"config field 'num_tasks' must be an integer, not {num_tasks!r}")
    persistent = _bool(cfg, "persistent_workers")
    num_epochs = max(max(epochs, default=0) + 1, PERSISTENT_EPOCHS) if persistent else 1
    # The loader's arguments, by the header's (torch's) names.
    loader = {
        "num_workers": _int(cfg, "num_workers"),
        "prefetch_factor": _int(cfg, "prefetch_factor"),
        "in_order": _bool(cfg, "in_order", True),
        "iterable": _bool(cfg, "iterable"),
        "persistent_workers": persistent,
        "pin_memory": _bool(cfg, "pin_memory"),
    }
    # default_constants' overrides: Python values of any type.
    of_loader: dict[str, Any] = {CONFIG_CONSTANT[field]: value for field, value in loader.items()}
    values = default_constants(
        **of_loader,
        NumTasks=num_tasks,
        NumEpochs=num_epochs,
        ResultCapacity=0,  # unbounded: a put is logged before it blocks, not when it completes
    )
    # Every fault switch (a With* constant) on: a fault only happens if it was logged.
    values.update({k: encode(True) for k in values if k.startswith(FAULT_SWITCH)})
    return Constants(tuple(values.items()))


def record_literal(record: Record) -> str:
    """One record as a TLA+ record; null fields are left out (see ``loaderspec.tlavalues``)."""
    fields = {name: record.field(name) for name in RECORD_FIELDS}
    return encode(fields)


def start_of(run: IteratorTrace) -> dict[str, Any]:
    """The state the run's iterator began from (its header's ``start``, docs/checkpoint.md),
    with ``total``, the sampler's batches of a map-style epoch. A header without one (another
    loader's) began a whole epoch 0.

    Raises:
        TraceConfigError: a ``start`` that is not a checkpoint (``CHECKPOINT_FIELDS``).
    """
    start = run.config.get(CONFIG_START)
    if start is None:
        workers = _int(run.config, "num_workers")
        iterable = _bool(run.config, "iterable")
        start = {
            "epoch": 0,
            "handed_below": 0,
            "handed_above": [],
            "batches": [0] * workers if iterable else [],
            "next_worker": 0,
            "user": [""] * max(workers, 1),  # (no user state, no generator state: digest "")
            "rng": "",
            "total": run.config.get("num_tasks") or 0,
        }
    if not isinstance(start, dict) or any(k not in start for k in (*CHECKPOINT_FIELDS, "total")):
        raise TraceConfigError(
            f"config field {CONFIG_START!r} must hold {', '.join(CHECKPOINT_FIELDS)} and total,"
            f" not {start!r}"
        )
    return start


def module_text(runs: Sequence[IteratorTrace]) -> str:
    """The generated ``TraceLog`` module: ``TraceLogs``, one sequence of records per run."""
    lines = [f"---- MODULE {LOG_MODULE} ----", "EXTENDS Integers, TLC", ""]
    lines.append("\\* Generated by loaderspec trace-check; one sequence of records per run:")
    for number, run in enumerate(runs, start=1):
        lines.append(f"\\*   {number}: {run.name}")
    lines.append("TraceLogs == <<")
    for number, run in enumerate(runs, start=1):
        body = ",\n    ".join(record_literal(r) for r in run.records)
        sep = "," if number < len(runs) else ""
        lines.append(f"  <<{body}>>{sep}" if body else f"  <<>>{sep}")
    lines += [">>", "", "\\* The state each run's iterator began from (its header's start):"]
    starts = ",\n  ".join(encode(start_of(run)) for run in runs)
    lines += [f"TraceStarts == <<{starts}>>", "", "===="]
    return "\n".join(lines) + "\n"


def cfg_text(
    constants: Constants,
    *,
    invariants: Sequence[str] = (),
    stop_trace: int = 0,
    stop_line: int = 0,
    check_post_state: bool = True,
    properties: Sequence[str] = (SPEC_STEP,),
) -> str:
    """The ``.cfg``, from the template ``spec/TraceDataLoader.cfg``: constants, the trace spec's
    init/next and its progress-printing invariant, plus the spec invariants to check.

    ``stop_trace``/``stop_line`` > 0 adds ``TraceNotAtStop``: TLC then stops at the first state
    where run ``stop_trace`` has consumed ``stop_line - 1`` records and prints the path there.
    ``check_post_state=False`` lets a record's action through whatever post-state it logged.
    ``properties``: action properties checked on every step TLC takes; ``SPEC_STEP``
    (``[][Next]_vars``) makes each accepted run a behaviour of the spec by TLC's check.
    """
    names = [*invariants, *(["TraceNotAtStop"] if stop_trace else [])]
    template = (spec_dir() / f"{TRACE_SPEC}.cfg").read_text()
    return template.format(
        constants="\n".join(f"    {name} = {value}" for name, value in constants.values),
        stop_trace=stop_trace,
        stop_line=stop_line,
        check_post_state=encode(check_post_state),
        invariants="\n".join(f"INVARIANT {name}" for name in names),
        properties="\n".join(f"PROPERTY {name}" for name in properties),
    )


def write_model(
    workdir: Path,
    name: str,
    runs: Sequence[IteratorTrace],
    constants: Constants,
    **cfg_options: Any,
) -> tuple[Path, Path]:
    """Write the spec's modules, the generated ``TraceLog`` and the cfg ``name.cfg`` into
    ``workdir``; returns the trace spec to run and its cfg.

    The spec's modules are copied beside the generated one so that TLC resolves ``EXTENDS`` in
    one folder, and TLC's ``states/`` can never land in ``spec/``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    for module in spec_dir().glob("*.tla"):  # DataLoader, TraceDataLoader and what they extend
        shutil.copyfile(module, workdir / module.name)
    (workdir / f"{LOG_MODULE}.tla").write_text(module_text(runs))
    cfg = workdir / f"{name}.cfg"
    cfg.write_text(cfg_text(constants, **cfg_options))
    return workdir / f"{TRACE_SPEC}.tla", cfg
