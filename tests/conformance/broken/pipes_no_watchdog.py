"""Bug: workers have no watchdog: one busy in a fetch when the loader's process dies goes on for
ever (an idle one ends at EOF on its task pipe, a blocked one at EPIPE) (NoOrphanWorkers).
Built on correct.pipes."""

from correct import pipes


class _Pipes(pipes.Pipes):
    def watch_parent(self) -> None:
        pass  # the bug


class Loader(pipes.Loader):
    transport = _Pipes
