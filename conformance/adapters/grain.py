"""`conformance.adapters.grain:Loader`: grain's `grain.python.DataLoader` behind torch's
DataLoader constructor.

grain's DataLoader reads records of a random-access data source in the order of its sampler;
each of its `worker_count` processes (grain's multiprocess prefetch) transforms the records
`i, i + worker_count, ...` and the main process interleaves the workers' outputs round-robin. To
hand grain's workers torch's batches, one record is one batch of torch's sampler
(conformance.adapters._front):

* the data source is the epoch's index batches from torch's samplers (drawn in the main process
  at `iter()`, as torch's iterator draws them; a seeded `generator` gives torch's shuffle);
* grain's sampler reads it in order once (`IndexSampler(shuffle=False, num_epochs=1)`);
* one `MapTransform` fetches and collates a batch with torch's fetcher, in grain's workers;
* `prefetch_factor` is grain's `worker_buffer_size` (batches produced ahead per worker).

So record k goes to worker k % num_workers and comes back in turn: torch's assignment and order.
A grain DataLoader holds its data source, so each `iter()` builds one for that epoch's batches;
grain starts new workers for every iterator anyway.

Checkpoint and resume: `state_dict()` is the epoch's batches, grain's iterator state
(`get_state()`, noted after every batch) and the generator's state once the epoch's order was
drawn; after an epoch's end, only the generator's (the next epoch is drawn from it).
`load_state_dict()` applies at the next `iter()`: the same batches, grain's `set_state()` (which
raises a ValueError naming both worker counts for a state of other workers). What the suite
measures is grain's: its
processes, queues, exit-code polling, shutdown and error handling. Dropping the iterator
closes it (grain's finalizer): `workers_die_with = "iterator"`. Starting an iterator's workers
takes seconds (spawn): the adapter declares it (`loaderspec_iterator_start_s`), and the cases
that start many iterators allow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    import grain.python as gp
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.grain needs grain: pip install 'loaderspec[grain]'"
    ) from exc

from loaderspec.conformance.adapters._front import (
    Adapter,
    BatchFetcher,
    Limit,
    draw_base_seed,
    given,
    index_batches,
    is_iterable,
    start_method,
)

__all__ = ["Loader"]


class _Batches(gp.RandomAccessDataSource):
    """One epoch of torch's index batches as grain's random-access data source."""

    def __init__(self, batches: Sequence[Any]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, record_key: int) -> Any:
        return self.batches[record_key]

    def __repr__(self) -> str:
        # grain checks a loaded state against repr(data_source): the epoch's batches, exactly.
        return f"_Batches({list(self.batches)!r})"


class _Relay:
    """The adapter's iterator: grain's, noting the position (grain's `get_state()`) after every
    batch in the loader's checkpoint, and the epoch's end; holds no reference from the loader,
    so dropping it still closes grain's iterator."""

    def __init__(self, owner: Loader, it: Any) -> None:
        self.owner, self.it = owner, it

    def __iter__(self) -> _Relay:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self.it)
        except StopIteration:
            self.owner._checkpoint = self.owner._next_epoch()
            raise
        self.owner._checkpoint = {**(self.owner._checkpoint or {}), "grain": self.it.get_state()}
        return batch


class _FetchTransform(gp.MapTransform):
    """grain's per-record transformation: torch's fetch + collate of one batch (in a worker)."""

    def __init__(self, fetch: BatchFetcher) -> None:
        self.fetch = fetch

    def map(self, element: Any) -> Any:
        return self.fetch(element)


class Loader(Adapter):
    """grain.python.DataLoader with torch.utils.data.DataLoader's constructor (torch 2.13)."""

    workers_die_with = "iterator"
    # Every iterator spawns its workers (grain's start method), each importing torch to run
    # torch's fetcher: from iter() to the end of a 4-batch epoch with 2 workers took 2.5-3 s on
    # the 2-core machine at load 1.2 and 19 s at load 7.5; 3 ranks of 2 workers each took 40 s
    # an epoch at load 15 (13 s per rank's iterator), and more than 70 s at load 23, where 20 s
    # a rank's iterator cut the 3-rank case off at epoch 2's start, its workers still importing
    # torch (2026-11-26). The resume and rank cases, which start up to 8 iterators one after
    # another (or 3 ranks' at once), allow this much more per iterator (faultinject.loaders),
    # and so does their pytest-timeout limit (conformance.plugin): a slow start is no hang.
    loaderspec_iterator_start_s = 30.0
    limits = (
        Limit(
            "an IterableDataset",
            "grain's DataLoader reads a random-access data source by record index",
            is_iterable,
        ),
        Limit(
            "worker_init_fn",
            "grain's DataLoader takes no worker init function (only Dataset.mp_prefetch does)",
            given("worker_init_fn"),
        ),
        Limit(
            "persistent_workers=True",
            "grain's DataLoader starts new worker processes for every iterator",
            given("persistent_workers"),
        ),
        Limit(
            "multiprocessing_context other than spawn",
            "grain starts its workers with the spawn start method, always",
            lambda o: start_method(o["multiprocessing_context"]) not in (None, "spawn"),
        ),
        Limit(
            "timeout > 0",
            "grain's DataLoader has no timeout for a batch",
            given("timeout"),
        ),
        Limit(
            "pin_memory=True",
            "grain has no pinned-memory stage (it hands out host arrays for JAX)",
            given("pin_memory"),
        ),
    )

    # grain keeps, once per process, a thread pool that deletes shared-memory arrays (started by
    # its first multiprocess iterator: SharedMemoryArray.enable_async_del) and multiprocessing's
    # shared heap, where its queues keep their counters (an arena, never given back while in
    # use). Neither belongs to one loader: the harness starts them before its leak baseline.
    _heap_holder: Any = None

    @classmethod
    def loaderspec_process_helpers(cls) -> None:
        import multiprocessing

        from grain._src.python.ipc import shared_memory_array

        shared_memory_array.SharedMemoryArray.enable_async_del(1)
        if cls._heap_holder is None:
            cls._heap_holder = multiprocessing.get_context("spawn").Value("i", 0, lock=False)

    _checkpoint: dict[str, Any] | None = None
    _loaded: dict[str, Any] | None = None

    def _generator_state(self) -> Any:
        generator = self._torch.generator
        return None if generator is None else generator.get_state()

    def _next_epoch(self) -> dict[str, Any]:
        return {"batches": None, "grain": None, "generator": self._generator_state()}

    def state_dict(self) -> dict[str, Any]:
        if self._loaded is not None:
            return dict(self._loaded)
        return dict(self._checkpoint or self._next_epoch())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loaded = dict(state)

    def __iter__(self) -> Any:
        dl = self._torch
        state, self._loaded = self._loaded, None
        if state is not None and state["generator"] is not None and dl.generator is not None:
            dl.generator.set_state(state["generator"])
        if state is not None and state["batches"] is not None:
            batches = state["batches"]  # the interrupted epoch, its order as drawn then
        else:
            state = None
            draw_base_seed(dl)  # torch's iterator draws it before its sampler does
            batches = list(index_batches(dl))
        self._checkpoint = {"batches": batches, "grain": None, "generator": self._generator_state()}
        if not batches:
            # grain's IndexSampler refuses 0 records: an epoch of no batches has nothing to load.
            self._checkpoint = self._next_epoch()
            return iter(())
        loader = gp.DataLoader(
            data_source=_Batches(batches),
            sampler=gp.IndexSampler(len(batches), shuffle=False, num_epochs=1),
            operations=[_FetchTransform(BatchFetcher(dl))],
            worker_count=dl.num_workers,
            worker_buffer_size=dl.prefetch_factor or 1,
            shard_options=gp.NoSharding(),
        )
        it = iter(loader)
        if state is not None and state["grain"] is not None:
            it.set_state(state["grain"])
            self._checkpoint = {**self._checkpoint, "grain": state["grain"]}
        return _Relay(self, it)
