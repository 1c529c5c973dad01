"""Bug: shutdown stops the workers but never waits for them: each stays a zombie for the life of
the loader's process (ShutdownCompletes). Built on correct.pipes."""

from correct import pipes
from correct.pipes import _Process


class _Pipes(pipes.Pipes):
    def wait_exits(self) -> None:
        pass  # the bug: nothing waits (and poll() would reap)

    def reap(self, p: _Process) -> None:
        pass  # the bug


class Loader(pipes.Loader):
    transport = _Pipes
