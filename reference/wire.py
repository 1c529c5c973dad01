"""How messages cross the pipes between the loader and its workers: one seam, two functions.

Owns the choice of byte format for index and result messages; knows nothing of the protocol.
``reference/transport.py`` sends tensors as their raw bytes inside one pipe message (no shared
memory, no file descriptor per tensor, unlike torch's ``ForkingPickler`` reductions, which is what
makes torch's per-batch IPC slow and what runs out of descriptors). Swapping the format is the
one assignment below (``_USE_TRANSPORT = False``: plain pickle, the fallback). ``send`` is
``write(pack(obj))``; the worker packs first so that it knows a result cannot be sent before it
logs the put.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any

from reference import transport

_USE_TRANSPORT = True


def send(conn: Connection, obj: Any) -> None:
    """Send one message (blocks while the pipe is full).

    Raises:
        TypeError: ``obj`` cannot be pickled; nothing was written.
        OSError: the reader is gone (``BrokenPipeError``).
    """
    write(conn, pack(obj))


def pack(obj: Any) -> list[bytes | memoryview]:
    """One message's bytes, for ``write``: pickling happens here, so a failure to pickle is
    known before anything is written (or logged as written).

    Raises:
        TypeError, AttributeError, pickle.PicklingError: ``obj`` cannot be pickled.
    """
    if _USE_TRANSPORT:
        return transport.pack(obj)
    return [pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)]


def write(conn: Connection, parts: list[bytes | memoryview]) -> None:
    """Write one packed message (blocks while the pipe is full).

    Raises:
        OSError: the reader is gone (``BrokenPipeError``).
    """
    if _USE_TRANSPORT:
        transport.write(conn, parts)
    else:
        conn.send_bytes(parts[0])


def recv(conn: Connection) -> Any:
    """Receive one message.

    Raises:
        EOFError: the writer closed between messages.
        OSError: the writer died mid-message (a torn message), or the pipe is closed.
    """
    if _USE_TRANSPORT:
        return transport.recv(conn)
    return pickle.loads(conn.recv_bytes())
