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
grain starts new workers for every iterator anyway. What the suite measures is grain's: its
processes, queues, exit-code polling, shutdown and error handling. Dropping the iterator
closes it (grain's finalizer): `workers_die_with = "iterator"`.
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

from conformance.adapters._front import (
    Adapter,
    Fetch,
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


class _FetchTransform(gp.MapTransform):
    """grain's per-record transformation: torch's fetch + collate of one batch (in a worker)."""

    def __init__(self, fetch: Fetch) -> None:
        self.fetch = fetch

    def map(self, element: Any) -> Any:
        return self.fetch(element)


class Loader(Adapter):
    """grain.python.DataLoader with torch.utils.data.DataLoader's constructor (torch 2.13)."""

    workers_die_with = "iterator"
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

    def __iter__(self) -> Any:
        dl = self._torch
        draw_base_seed(dl)  # torch's iterator draws it before its sampler does
        batches = list(index_batches(dl))
        if not batches:
            # grain's IndexSampler refuses 0 records: an epoch of no batches has nothing to load.
            return iter(())
        loader = gp.DataLoader(
            data_source=_Batches(batches),
            sampler=gp.IndexSampler(len(batches), shuffle=False, num_epochs=1),
            operations=[_FetchTransform(Fetch(dl))],
            worker_count=dl.num_workers,
            worker_buffer_size=dl.prefetch_factor or 1,
            shard_options=gp.NoSharding(),
        )
        return iter(loader)
