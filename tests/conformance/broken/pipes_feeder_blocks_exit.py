"""Bug: a worker hands its results to a feeder thread (as `multiprocessing.Queue.put` does) and,
once its parent is gone, flushes them before it exits (as a Queue's exit-time join of its feeder
does without `cancel_join_thread()`): with the result pipe full and nobody reading, it never
exits (NoOrphanWorkers). Idle workers, with nothing queued, exit at once. Built on the
correct pipes loader (tests/conformance/correct/pipes.py).

The watchdog leaves a worker that holds a task to its loop, which puts that result, then
flushes: otherwise a worker whose parent died while it was still pickling its first oversized
result found nothing queued yet and exited, and the case passed (seen once, at high load)."""

import os
import queue
import threading
import time
from typing import Any

from correct import pipes


class _Feeder(pipes.Pipes):
    outbox: "queue.Queue[bytes] | None" = None
    taken = queued = 0  # tasks this worker took, results it queued

    def stop_fetching(self, done: int) -> bool:
        stop = super().stop_fetching(done)
        if not stop:
            self.taken += 1  # a task in hand: its result will be queued, then flushed
        return stop

    def closed_in_worker(self, p: pipes._Process) -> tuple[int, ...]:
        # Every process holds both ends of a multiprocessing.Queue's pipe: so does this worker.
        return (p.tasks, p.done)

    def put_result(self, results: int, data: bytes) -> None:
        if self.outbox is None:
            self.outbox = queue.Queue()
            threading.Thread(target=self._feed, args=(results,), daemon=True).start()
        self.outbox.put(data)  # returns at once; the feeder writes it
        self.queued += 1

    def _feed(self, results: int) -> None:
        assert self.outbox is not None
        while True:
            data = self.outbox.get()
            pipes._write(results, data)
            self.outbox.task_done()

    def worker_loop(self, *args: Any) -> None:
        super().worker_loop(*args)
        self.flush()  # the worker's loop ended (its parent gone): the exit waits for the feeder

    def watch_parent(self) -> None:
        threading.Thread(target=self._watch, args=(os.getppid(),), daemon=True).start()

    def _watch(self, parent: int) -> None:
        while os.getppid() == parent:
            time.sleep(pipes.WATCH_S)
        if self.taken > self.queued:
            return  # the worker's loop queues that result, then flushes at its end (the bug)
        self.flush()
        os._exit(1)

    def flush(self) -> None:
        if self.outbox is not None:
            self.outbox.join()  # the bug: flush the results nobody will read, then exit


class Loader(pipes.Loader):
    transport = _Feeder
