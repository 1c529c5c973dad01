"""Reading the workers' result pipes and noticing their deaths, in one wait.

Owns the receiving end of every worker's result pipe and the workers' process sentinels. One
``poll(2)`` covers both, so a result and a death wake the reader at once (no status-check
interval). The ``select.poll`` object is kept across calls: ``multiprocessing.connection.wait``
builds a selector per call, ~30 us against ~1.3 us, and the main process polls once per batch.
Used by whoever reads results: the main process, or the pin thread when there is one. Does not
know the protocol: it turns what arrives into ``reference.messages`` events, in arrival order.

A torn message is not a clean EOF (CPython's ``connection.py``): a worker killed mid-send leaves a
partial message whose read fails with EOF; the pipe is dropped, and the worker's sentinel (ready
because the process ended) reports the death. Before an exit is reported, whatever the worker
finished sending is read, so its results are never silently lost behind its death. A message
that arrived whole but cannot be rebuilt here (a class this process cannot import, say) is a
``RecvFailed`` event (the spec's FaultRecvError): lost, and the reader decides what that means.
"""

from __future__ import annotations

import math
import select
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from loaderspec.reference import wire
from loaderspec.reference.arena import MainArena
from loaderspec.reference.messages import Arrived, Exited, RecvFailed, Result, WaitEvent

_new = tuple.__new__  # Arrived(...) without the NamedTuple's Python-level __new__: once a batch


class Receiver:
    """Per-worker result pipes and sentinels, read into an ``inbox`` of events in arrival order."""

    def __init__(
        self,
        conns: list[Connection],
        sentinels: list[int],
        arenas: list[MainArena | None] | None = None,
    ) -> None:
        self._conns: dict[Connection, int] = {c: w for w, c in enumerate(conns)}
        # each pipe's reader: it reads ahead, so every result waiting comes in with one read
        self._readers = {c: wire.result_reader(c) for c in conns}
        # each worker's shared-memory slots (reference/arena.py), for the batches that use them
        self._arenas: list[MainArena | None] = arenas or [None] * len(conns)
        self._by_worker: dict[int, Connection] = dict(enumerate(conns))
        self._sentinels: dict[int, int] = {s: w for w, s in enumerate(sentinels)}
        self.inbox: deque[WaitEvent] = deque()
        self._poller = select.poll()
        self._by_fd: dict[int, Any] = {}  # registered fd -> its pipe, sentinel or extra object
        for obj in [*conns, *sentinels]:
            self._register(obj)

    def _register(self, obj: Any) -> None:
        fd = obj if isinstance(obj, int) else obj.fileno()
        self._poller.register(fd, select.POLLIN)
        self._by_fd[fd] = obj

    def _unregister(self, obj: Any) -> None:
        fd = obj if isinstance(obj, int) else obj.fileno()
        if self._by_fd.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def poll(self, timeout: float | None, extra: tuple[Any, ...] = ()) -> list[Any]:
        """Wait up to ``timeout`` s for results or exits; append them to ``inbox``.

        Returns the objects of ``extra`` that became ready (a wake-up pipe, say).
        """
        for obj in extra:
            if (obj if isinstance(obj, int) else obj.fileno()) not in self._by_fd:
                self._register(obj)  # kept registered: the same wake-up pipe comes every call
        ms = None if timeout is None else math.ceil(max(timeout, 0.0) * 1000)
        ready = [self._by_fd[fd] for fd, _ in self._poller.poll(ms) if fd in self._by_fd]
        woken = []
        for obj in ready:
            if obj in self._conns:
                self._recv(obj)
            elif isinstance(obj, int) and obj in self._sentinels:
                worker = self._sentinels.pop(obj)
                self._unregister(obj)
                self._drain(worker)
                self.inbox.append(Exited((worker,)))
            else:
                woken.append(obj)
        return woken

    def _recv(self, conn: Connection) -> bool:
        """Read the message that made ``conn`` readable, and every whole message the same read
        brought in: what stays buffered is at most the start of one, whose rest (or the
        writer's EOF) makes the pipe readable again, so a ``poll`` never sleeps on a result
        that is already here."""
        worker, reader = self._conns[conn], self._readers[conn]
        arena = self._arenas[worker]
        while True:
            try:
                message = reader.recv(arena)
            except (EOFError, OSError):
                # EOF or a torn message: the writer is gone. Its sentinel reports how it ended.
                del self._conns[conn]
                self._unregister(conn)
                return False
            except Exception as exc:  # read whole, not rebuilt: the framing is intact, go on
                self.inbox.append(RecvFailed(worker, f"{type(exc).__name__}: {exc}"))
            else:
                self.inbox.append(_new(Arrived, (worker, Result.from_wire(message))))
            if not reader.has_message():
                return True

    def _drain(self, worker: int) -> None:
        conn = self._by_worker.get(worker)
        while conn in self._conns and conn.poll(0):
            if not self._recv(conn):
                break

    def close(self) -> None:
        """Close every result pipe (the main process's ends)."""
        for fd in list(self._by_fd):
            self._poller.unregister(fd)
        self._by_fd.clear()
        for conn in self._by_worker.values():
            conn.close()
        self._conns.clear()
        self._sentinels.clear()
