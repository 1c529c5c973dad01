"""Bug: keeps every iterator alive for ever and never shuts one down, so its workers stay
(ShutdownCompletes; pytorch/pytorch#21554: a timeout that raises and leaves the workers).

Keeping the iterator alone is not enough where the reference shuts itself down (its fail-stop
at a timeout kills the workers): what was left then was only zombies and fds, and whether the
reaping raced ahead decided the case. So the iterator's shutdown is never done either."""

from typing import Any

from broken._wrap import Relay, Wrapped

_KEPT: list[Any] = []


def _never() -> None:
    """The iterator's shut_down, replaced: nothing is stopped, closed or reaped."""


class Loader(Wrapped):
    def __iter__(self) -> Relay:
        it = iter(self.inner)
        it.shut_down = _never  # the bug: nobody ever stops its workers...
        _KEPT.append(it)  # ...or lets go of it
        return self.relay(self, it)
