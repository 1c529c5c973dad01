"""Bug: keeps every iterator (and so its workers) alive for ever (ShutdownCompletes)."""

from typing import Any

from broken._wrap import Relay, Wrapped

_KEPT: list[Any] = []


class Loader(Wrapped):
    def __iter__(self) -> Relay:
        it = iter(self.inner)
        _KEPT.append(it)  # the bug: nobody ever lets go of it
        return self.relay(self, it)
