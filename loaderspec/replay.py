"""Play one fault schedule against a loader class, in a sandbox, optionally tracing it.

Owns ``Schedule`` (a loader configuration plus the faults to inject and the user's moves: how
many epochs, when to break off, when the loader's process is killed) and ``play``, which runs
it in a ``faultinject.sandbox`` child against any torch-compatible loader class ("black box")
and returns what the user saw. With ``trace_dir`` the reference loader's trace records land
there (each iterator's ``Config`` header included: the loader writes it, docs/contracts.md), so
``loaderspec trace-check`` can check the run.
Must not know TLA+ (``loaderspec.scenarios`` derives schedules from the spec).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_ENV = "LOADERSPEC_TRACE_DIR"
FORCE_PIN_ENV = "LOADERSPEC_FORCE_PIN_THREAD"
REFERENCE = "reference:DataLoader"
# Timeouts in schedules: long enough that a loaded CI machine does not time out by accident,
# short enough that a hang costs little.
TIMEOUT_S = 1.0
HANG_S = 30.0  # a hung fetch lasts this long at most; the loader must not wait for it
# Faults whose item default_collate would reject before the loader ever sends it.
_PASS_THROUGH_COLLATE = frozenset({"Unpicklable", "Unloadable"})


@dataclass(frozen=True)
class Schedule:
    """A loader configuration and what goes wrong when (all picklable, for the sandbox).

    ``faults`` are ``faultinject.faults`` instances (their ``at`` is a dataset index, or an item
    number in a worker's shard when ``shard_lengths`` makes the dataset iterable).
    ``drop_at``/``kill_parent_at`` are ``(epoch, n)``: after ``n`` successful or failed
    ``next()`` calls of that epoch the user breaks off / the loader's process is SIGKILLed.
    """

    name: str
    num_workers: int = 2
    num_items: int = 8
    batch_size: int = 1
    shard_lengths: tuple[int, ...] | None = None  # an IterableDataset with these shards
    prefetch_factor: int = 2
    in_order: bool = True
    persistent_workers: bool = False
    pin_memory: bool = False
    epochs: int = 1
    timeout: float = 0.0
    faults: tuple[Any, ...] = ()
    drop_at: tuple[int, int] | None = None
    kill_parent_at: tuple[int, int] | None = None
    in_thread: bool = False  # drive the loader from a thread other than the main one
    note: str = ""  # where the schedule came from (a spec path, a Hypothesis draw)

    @property
    def iterable(self) -> bool:
        return self.shard_lengths is not None


@dataclass
class Epoch:
    """What the user saw in one epoch."""

    items: list[Any] = field(default_factory=list)  # each batch, as a list
    errors: list[str] = field(default_factory=list)  # "n: Type: message" per raised next()
    end: str = "stop"  # "stop" (StopIteration), "break", "fatal" (RuntimeError), "killed"


@dataclass
class Replay:
    """The outcome of one ``play``: the sandbox's report and the epochs the user saw."""

    schedule: Schedule
    outcome: str  # the sandbox's: returned | raised | deadline | killed
    epochs: list[Epoch]
    error: str | None
    elapsed_s: float
    clean: bool  # the sandbox found nothing left behind
    leftovers: str
    orphan_exit_s: dict[int, float | None]
    trace_dir: Path | None


def _load(ref: str) -> type:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def dataset_of(schedule: Schedule) -> Any:
    """The faultinject dataset the schedule runs on."""
    from faultinject.datasets import FaultyDataset, FaultyIterable

    if schedule.shard_lengths is not None:
        return FaultyIterable(schedule.shard_lengths, schedule.faults)
    return FaultyDataset(schedule.num_items, schedule.faults)


def _as_list(batch: Any) -> Any:
    return batch.tolist() if hasattr(batch, "tolist") else batch


def _fatal(exc: BaseException) -> bool:
    """A loader's own failure (worker death, timeout): the iterator is done."""
    return isinstance(exc, RuntimeError) and "DataLoader" in str(exc)


def _play(schedule: Schedule, loader_ref: str, trace_dir: str | None) -> list[Epoch]:
    """The sandbox child's target: build the loader, iterate as scheduled, report."""
    if not schedule.in_thread:
        return _play_here(schedule, loader_ref, trace_dir)
    result: list[list[Epoch]] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            result.append(_play_here(schedule, loader_ref, trace_dir))
        except BaseException as exc:  # re-raised in the sandbox's main thread
            errors.append(exc)

    thread = threading.Thread(target=body, name="loaderspec-replay")
    thread.start()
    thread.join()  # bounded by the sandbox's deadline (it kills the whole child)
    if errors:
        raise errors[0]
    return result[0]


def _play_here(schedule: Schedule, loader_ref: str, trace_dir: str | None) -> list[Epoch]:
    from faultinject import sandbox

    if schedule.pin_memory:  # a pin thread even without an accelerator (docs/contracts.md)
        os.environ[FORCE_PIN_ENV] = "1"
    cls = _load(loader_ref)
    tracing = sys.modules.get("reference.tracing")  # the reference, or a loader built on it
    if trace_dir is not None:
        os.environ[TRACE_ENV] = trace_dir
        if tracing is not None:
            tracing.configure(trace_dir)
    kwargs: dict[str, Any] = {
        "batch_size": schedule.batch_size,
        "num_workers": schedule.num_workers,
        "prefetch_factor": schedule.prefetch_factor,
        "persistent_workers": schedule.persistent_workers,
        "pin_memory": schedule.pin_memory,
        "timeout": schedule.timeout,
    }
    if not schedule.in_order:
        kwargs["in_order"] = False
    if any(type(f).__name__ in _PASS_THROUGH_COLLATE for f in schedule.faults):
        import faultinject

        kwargs["collate_fn"] = faultinject.collate()  # the put or the read fails, not collate
    loader = cls(dataset_of(schedule), **kwargs)
    epochs: list[Epoch] = []
    for e in range(schedule.epochs):
        epoch = Epoch()
        epochs.append(epoch)
        it = iter(loader)
        n = 0
        while True:
            if schedule.kill_parent_at == (e, n):
                epoch.end = "killed"
                sandbox.kill_self()
            if schedule.drop_at == (e, n):
                epoch.end = "break"
                break
            try:
                batch = next(it)
            except StopIteration:
                break
            except Exception as exc:
                epoch.errors.append(f"{n}: {type(exc).__name__}: {exc}".splitlines()[0])
                n += 1
                if _fatal(exc):
                    epoch.end = "fatal"
                    break
                continue
            epoch.items.append(_as_list(batch))
            n += 1
        del it
        gc.collect()
    del loader
    gc.collect()
    if trace_dir is not None and tracing is not None:
        tracing.configure(None)  # close our trace file: it is not a leaked descriptor
    return epochs


def loader_ref_of(loader: str | type) -> str:
    """``"pkg.mod:Class"`` for a loader class (the conformance suite's ``loader_cls``) or a ref.

    Raises:
        ValueError: a class the sandbox's child could not import by name (a local class).
    """
    if isinstance(loader, str):
        return loader
    ref = f"{loader.__module__}:{loader.__qualname__}"
    if "<locals>" in ref or "." in loader.__qualname__:
        raise ValueError(f"{ref}: a sandboxed replay needs a module-level loader class")
    return ref


def play(
    schedule: Schedule,
    loader: str | type = REFERENCE,
    *,
    trace_dir: Path | None = None,
    deadline_s: float = 30.0,
) -> Replay:
    """Run ``schedule`` against a loader class (or its ``"pkg.mod:Class"``) in a sandbox.

    Raises:
        ValueError: see ``loader_ref_of``.
    """
    from faultinject import sandbox

    loader_ref = loader_ref_of(loader)

    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
    # Import here, once: the forked child inherits the modules instead of importing torch.
    _load(loader_ref)
    dataset_of(schedule)
    started = time.monotonic()
    report = sandbox.run(
        _play,
        schedule,
        loader_ref,
        None if trace_dir is None else str(trace_dir),
        deadline_s=deadline_s,
        orphan_grace_s=2.0,
    )
    epochs = report.value if isinstance(report.value, list) else []
    return Replay(
        schedule=schedule,
        outcome=report.outcome,
        epochs=epochs,
        error=report.error,
        elapsed_s=time.monotonic() - started,
        clean=report.clean,
        leftovers=report.leftovers(),
        orphan_exit_s=dict(report.orphan_exit_s),
        trace_dir=trace_dir,
    )
