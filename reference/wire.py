"""How messages cross the pipes between the loader and its workers: one seam, a few functions.

Owns the byte format of index and result messages; knows nothing of the protocol.
``reference/transport.py`` sends tensors as their raw bytes inside one pipe message (no shared
memory segment and no file descriptor per tensor, unlike torch's ``ForkingPickler`` reductions,
which is what makes torch's per-batch IPC slow and what runs out of descriptors), and big tensors
as references to the worker's shared-memory slots (``reference/arena.py``). ``send`` is
``write(pack(obj))``; the worker packs first so that it knows a result cannot be sent before it
logs the put.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

from loaderspec.reference import transport
from loaderspec.reference.arena import MainArena, WorkerArena


def send(conn: Connection, obj: Any, arena: WorkerArena | None = None) -> None:
    """Send one message (blocks while the pipe is full); a worker passes its ``arena``.

    Raises:
        TypeError: ``obj`` cannot be pickled; nothing was written.
        OSError: the reader is gone (``BrokenPipeError``).
    """
    write(conn, pack(obj, arena))


def pack(obj: Any, arena: WorkerArena | None = None) -> list[bytes | memoryview]:
    """One message's bytes, for ``write``: pickling happens here, so a failure to pickle is
    known before anything is written (or logged as written). The ``arena``'s slots the message
    refers to count as sent from here (``transport.pack``).

    Raises:
        TypeError, AttributeError, pickle.PicklingError: ``obj`` cannot be pickled.
    """
    return transport.pack(obj, arena)


def write(conn: Connection, parts: list[bytes | memoryview]) -> None:
    """Write one packed message (blocks while the pipe is full).

    Raises:
        OSError: the reader is gone (``BrokenPipeError``).
    """
    transport.write(conn, parts)


def send_index(conn: Connection, message: Any) -> None:
    """Send an index-queue message (a task's ``(idx, index)``, RESUME or SENTINEL).

    Raises:
        TypeError: ``message`` cannot be pickled; nothing was written.
        OSError: the reader is gone (``BrokenPipeError``).
    """
    transport.send_plain(conn, message)


def index_reader(conn: Connection) -> transport.PlainReader:
    """The worker's reader of its index queue (``send_index``'s messages): its ``recv()`` reads
    ahead, several messages per read when several wait; the pipe has no other reader.

    ``recv()`` raises ``EOFError`` (the loader closed the queue between messages) or ``OSError``
    (closed mid-message)."""
    return transport.PlainReader(conn)


def result_reader(conn: Connection) -> transport.Reader:
    """The main process's reader of one worker's result pipe: its ``recv(arena)`` reads ahead
    (every result waiting comes in with one read) and ``has_message()`` says whether one is
    whole in its buffer; the pipe has no other reader. ``recv`` raises as ``recv`` below."""
    return transport.Reader(conn)


def recv(conn: Connection, arena: MainArena | None = None) -> Any:
    """Receive one message; ``arena``: the sending worker's, for batches in its slots.

    Raises:
        EOFError: the writer closed between messages.
        OSError: the writer died mid-message (a torn message), or the pipe is closed.
    """
    return transport.recv(conn, arena)
