"""Bug: every iterator, when it is dropped, leaves a thread blocked for ever on a pipe and both
of the pipe's fds open (ShutdownCompletes). The suite must still grade it in minutes: once a
loader has left something after the full wait, later cases wait less (conformance.harness)."""

import os
import threading

from broken._wrap import Relay, Wrapped


def _leak() -> None:
    read, _write = os.pipe()  # the bug: neither end is ever closed
    threading.Thread(target=os.read, args=(read, 1), name="leaked-reader", daemon=True).start()


class _Leaky(Relay):
    def __del__(self) -> None:
        _leak()


class Loader(Wrapped):
    relay = _Leaky
