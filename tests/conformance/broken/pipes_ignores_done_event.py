"""Bug: a worker does not look at the done pipe: once shutdown began it goes on fetching every task
already queued to it, while shutdown waits up to 5 s for it to exit, as torch's does
(ShutdownCompletes: the NOTE's "workers will not process data after the done event"). Built on
correct.pipes."""

from correct import pipes


class _Pipes(pipes.Pipes):
    join_s = 5.0  # torch's join timeout: time enough to see what the workers do meanwhile

    def stop_fetching(self, done: int) -> bool:
        return False  # the bug


class Loader(pipes.Loader):
    transport = _Pipes
