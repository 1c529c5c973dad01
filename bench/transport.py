"""Transport figures: microseconds per batch across a real process boundary.

Owns one measurement: a forked child sends ``n`` batches down a ``Pipe`` as fast as it can and
the parent receives them; the figure is the parent's elapsed time per batch (sender and receiver
overlap, as a worker and the main process do). The child builds a fresh batch per message with
``clone()``, as collate does: sending one tensor again would let torch's reducer reuse its
shared-memory segment and hide its real per-batch cost.

Methods, all on the same pipe:

* ``reference``: ``reference.transport.send`` / ``recv`` (writev/readv, no user-space copy).
* ``reference-bytes``: ``transport.dumps`` + ``send_bytes`` / ``recv_bytes`` + ``loads``.
* ``torch``: torch's ``ForkingPickler`` reductions (a shared-memory segment and a file
  descriptor per storage), what ``torch.utils.data`` workers use.
* ``pickle``: plain pickle of the same batch (torch's own ``Tensor.__reduce_ex__``).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch

from bench.rows import Row, na

# Batches measured: what default_collate makes of 4 items of 64 floats, and of 4 items of 1 MB.
SHAPES: dict[str, tuple[int, ...]] = {"cheap 4x64 f32": (4, 64), "large 4x1MB f32": (4, 262_144)}
METHODS = ("reference", "reference-bytes", "torch", "pickle")
_DEADLINE_S = 60.0


def _send_fn(method: str) -> Callable[[Connection, Any], None]:
    if method == "reference":
        from loaderspec.reference import transport

        return transport.send
    if method == "reference-bytes":
        from loaderspec.reference import transport

        return lambda conn, obj: conn.send_bytes(transport.dumps(obj))
    if method == "torch":
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401  (registers torch's ForkingPickler reductions)

        return lambda conn, obj: conn.send_bytes(ForkingPickler.dumps(obj))
    return lambda conn, obj: conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _recv_fn(method: str) -> Callable[[Connection], Any]:
    if method == "reference":
        from loaderspec.reference import transport

        return transport.recv
    if method == "reference-bytes":
        from loaderspec.reference import transport

        return lambda conn: transport.loads(conn.recv_bytes())
    if method == "torch":
        from multiprocessing.reduction import ForkingPickler

        import torch.multiprocessing  # noqa: F401

        return lambda conn: ForkingPickler.loads(conn.recv_bytes())
    return lambda conn: pickle.loads(conn.recv_bytes())


def _sender(
    data: Connection, control: Connection, method: str, shape: tuple[int, ...], n: int
) -> None:
    """Child: wait for the go byte, then send ``n`` fresh batches."""
    send = _send_fn(method)
    template = torch.randn(shape)
    control.recv_bytes()
    for _ in range(n):
        send(data, template.clone())
    # Wait for the parent's done byte: torch's reducer needs the sender alive until the receiver
    # has fetched every file descriptor.
    control.recv_bytes()


def measure(method: str, shape: tuple[int, ...], n: int) -> float:
    """Microseconds per batch for ``n`` batches of ``shape`` sent with ``method``."""
    ctx = mp.get_context("fork")
    # A one-way data pipe (an os.pipe, as a worker's result pipe) and a control pipe.
    reader, writer = ctx.Pipe(duplex=False)
    control, child_control = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_sender, args=(writer, child_control, method, shape, n), daemon=True)
    proc.start()
    writer.close()
    child_control.close()
    recv = _recv_fn(method)
    try:
        control.send_bytes(b"go")
        start = time.perf_counter()
        for _ in range(n):
            if not reader.poll(_DEADLINE_S):
                raise TimeoutError(f"{method}: no batch within {_DEADLINE_S} s")
            recv(reader)
        elapsed = time.perf_counter() - start
        control.send_bytes(b"done")
    finally:
        proc.join(_DEADLINE_S)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        reader.close()
        control.close()
    return elapsed / n * 1e6


def rows(quick: bool) -> list[Row]:
    """One row per (batch, method), plus torch/reference ratios."""
    out: list[Row] = []
    for label, shape in SHAPES.items():
        large = shape[-1] > 10_000
        n = (8 if large else 150) if quick else (150 if large else 3000)
        figures: dict[str, float] = {}
        for method in METHODS:
            name = f"transport {label}: {method}"
            try:
                figures[method] = measure(method, shape, n)
            except Exception as exc:  # a missing module or a failed method is a row, not a crash
                out.append(Row("transport", name, None, "us/batch", na(exc)))
                continue
            out.append(Row("transport", name, figures[method], "us/batch", f"n={n}"))
        ratio_name = f"transport {label}: torch / reference"
        if "torch" in figures and "reference" in figures:
            out.append(Row("transport", ratio_name, figures["torch"] / figures["reference"], "x"))
        else:
            out.append(Row("transport", ratio_name, None, "x", "n/a: a method failed above"))
    return out
