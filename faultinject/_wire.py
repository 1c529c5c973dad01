"""Length-prefixed pickles over a pipe, between the sandbox harness and its child.

One message is an 8-byte big-endian length and a pickle. Writes are blocking (the child's messages
are small, and the harness always reads); reads go through `ReceiveBuffer`, which never blocks: the
harness feeds it whatever `os.read` returned after `select` said the pipe was readable.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

__all__ = ["ReceiveBuffer", "send"]

_HEADER = struct.Struct(">Q")


def send(fd: int, message: Any) -> None:
    """Write one message to `fd`, all of it."""
    data = pickle.dumps(message)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class ReceiveBuffer:
    """Collects bytes and hands back the whole messages among them."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """Add `data`; return every message now complete, oldest first."""
        self._buf += data
        out = []
        while len(self._buf) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + n:
                break
            out.append(pickle.loads(bytes(self._buf[_HEADER.size : _HEADER.size + n])))
            del self._buf[: _HEADER.size + n]
        return out


def recv_blocking(fd: int) -> Any:
    """Read exactly one message from a blocking `fd` (the child reading its job).

    Raises:
        EOFError: the other end closed before a whole message arrived.
    """

    def read_exactly(n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = os.read(fd, n - len(chunks))
            if not chunk:
                raise EOFError("sandbox pipe closed mid-message")
            chunks += chunk
        return bytes(chunks)

    (n,) = _HEADER.unpack(read_exactly(_HEADER.size))
    return pickle.loads(read_exactly(n))
