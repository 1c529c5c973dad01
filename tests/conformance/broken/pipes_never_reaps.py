"""Bug: shutdown stops the workers but never waits for them: each stays a zombie for the life of
the loader's process (ShutdownCompletes). Built on correct.pipes."""

import os

from correct import pipes


class _Pipes(pipes.Pipes):
    def close(self) -> None:
        for p in self.workers:
            os.close(p.done)  # the worker sees EOF on its done pipe and exits
            os.close(p.tasks)
            # The bug: nothing waits for the worker, reaps it, or asks whether it exited (a
            # poll() would reap one that already had, and then only a slow exit would show).
            os.close(p.results)


class Loader(pipes.Loader):
    transport = _Pipes
