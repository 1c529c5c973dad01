"""Reading the workers' result pipes and noticing their deaths, in one wait.

Owns the receiving end of every worker's result pipe and the workers' process sentinels. One
``multiprocessing.connection.wait`` covers both, so a result and a death wake the reader at once
(no status-check interval). Used by whoever reads results: the main process, or the pin thread
when there is one. Does not know the protocol or what the messages mean.

A torn message is not a clean EOF (CPython's ``connection.py``): a worker killed mid-send leaves a
partial message whose read fails with EOF; the pipe is dropped, and the worker's sentinel (ready
because the process ended) reports the death. Before an exit is reported, whatever the worker
finished sending is read, so its results are never silently lost behind its death.
"""

from __future__ import annotations

from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any

from reference import wire

MSG = "msg"  # (MSG, worker, message)
EXIT = "exit"  # (EXIT, worker): the worker process has ended


class Receiver:
    """Per-worker result pipes and sentinels, read into an ``inbox`` of events in arrival order."""

    def __init__(self, conns: list[Connection], sentinels: list[int]) -> None:
        self._conns: dict[Connection, int] = {c: w for w, c in enumerate(conns)}
        self._by_worker: dict[int, Connection] = dict(enumerate(conns))
        self._sentinels: dict[int, int] = {s: w for w, s in enumerate(sentinels)}
        self.inbox: deque[tuple[Any, ...]] = deque()

    def poll(self, timeout: float | None, extra: tuple[Any, ...] = ()) -> list[Any]:
        """Wait up to ``timeout`` s for results or exits; append them to ``inbox``.

        Returns the objects of ``extra`` that became ready (a wake-up pipe, say).
        """
        objs: list[Any] = [*self._conns, *self._sentinels, *extra]
        ready = wait(objs, timeout)
        woken = []
        for obj in ready:
            if obj in self._conns:
                self._recv(obj)
            elif isinstance(obj, int) and obj in self._sentinels:
                worker = self._sentinels.pop(obj)
                self._drain(worker)
                self.inbox.append((EXIT, worker))
            else:
                woken.append(obj)
        return woken

    def _recv(self, conn: Connection) -> bool:
        worker = self._conns[conn]
        try:
            message = wire.recv(conn)
        except (EOFError, OSError):
            # EOF or a torn message: the writer is gone. Its sentinel reports how it ended.
            del self._conns[conn]
            return False
        self.inbox.append((MSG, worker, message))
        return True

    def _drain(self, worker: int) -> None:
        conn = self._by_worker.get(worker)
        while conn in self._conns and conn.poll(0):
            if not self._recv(conn):
                break

    def close(self) -> None:
        """Close every result pipe (the main process's ends)."""
        for conn in self._by_worker.values():
            conn.close()
        self._conns.clear()
        self._sentinels.clear()
