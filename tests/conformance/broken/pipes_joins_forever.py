"""Bug: shutdown waits for every worker to exit, with no bound and no kill: a worker stuck in a
fetch keeps the user's `del it` waiting for ever (ShutdownCompletes). Built on correct.pipes."""

import os

from correct import pipes
from correct.pipes import _Process


class _Pipes(pipes.Pipes):
    def kill(self, p: _Process) -> None:
        pass  # the bug: no kill ...

    def reap(self, p: _Process) -> None:
        if p.status is None:
            os.waitpid(p.pid, 0)  # ... and a wait with no bound


class Loader(pipes.Loader):
    transport = _Pipes
