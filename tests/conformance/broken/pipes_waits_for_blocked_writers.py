"""Bug: shutdown waits up to 5 s for each worker to exit before killing it, without reading what
the workers still write: a worker blocked writing a large result cannot exit, so dropping the
iterator takes 5 s (PromptFaultHandling: NON-STRICT; torch's workers call cancel_join_thread so
that their result queue is not flushed at exit). Built on correct.pipes."""

import time

from correct import pipes

JOIN_S = 5.0


class _Pipes(pipes.Pipes):
    def wait_exits(self) -> None:
        deadline = time.monotonic() + JOIN_S
        for p in self.workers:
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)  # the bug: nobody reads, a blocked writer never exits


class Loader(pipes.Loader):
    transport = _Pipes
