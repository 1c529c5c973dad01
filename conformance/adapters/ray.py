"""`conformance.adapters.ray:Loader`: Ray Data's `iter_torch_batches` behind torch's DataLoader
constructor.

Ray Data streams blocks of rows out of Ray's object store through its streaming executor, and
its iterator batches the rows, prefetches `prefetch_batches` batches ahead and runs the user's
`collate_fn` in a pool of that many threads of the loader's process (at most 4,
`DEFAULT_FORMAT_THREADPOOL_NUM_WORKERS`), handing batches out in order. To grade it on the
suite's datasets (conformance.adapters._front):

* at `iter()` the epoch's order is drawn from torch's sampler in the loader's process (as torch's
  iterator draws it: a seeded `generator` gives torch's shuffle, a `DistributedSampler` a rank's
  part), and `ray.data.from_items` puts the indices into Ray's object store as rows;
* Ray batches the rows (`batch_size`, `drop_last` are Ray's), and the `collate_fn` given to
  `iter_torch_batches` fetches each batch's items with torch's fetcher (`dataset[i]`, where the
  suite's faults fire) and collates them with torch's `collate_fn`, in Ray's format threads;
* `num_workers` is Ray's `prefetch_batches` (0: no prefetch, the collate in the thread that
  calls next()), so the loader's workers are threads (`loaderspec_workers`);
* `DataContext.execution_options.preserve_order` is set: Ray Data's order is not its input's
  otherwise (`ray.data.range(8).iter_torch_batches(batch_size=3)` handed out [0, 1, 4], ... in
  the first run measured).

The fetch runs in the loader's process, not in Ray tasks: every scenario is a Ray driver of its
own (a new job), and a job's first task waits for a Ray worker process to start for it (2.6 s
measured for an 8-row `map`), which over the suite's scenarios would put its whole run past the
5 minutes a loader's suite may take. What the suite measures is Ray Data's own: its executor,
prefetcher and format threads, batching, ordering, error handling and shutdown.

Ray itself runs once per suite run (`conformance.adapters._ray_runtime`): the constructor
starts a runtime unless one is there (the harness builds a loader before any scenario, so the
cluster comes up outside every scenario's deadline), and each loader process joins it in
`loaderspec_process_helpers` (before the harness's leak baseline, as the process-wide state it
is) or at its first `iter()`. There is no iterator state: Ray Data's
iterators cannot be checkpointed, so the resume cases SKIP. The iterator is Ray's generator:
dropping it ends the epoch's execution (`workers_die_with = "iterator"`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from loaderspec.conformance.adapters import _ray_runtime
from loaderspec.conformance.adapters._front import (
    Adapter,
    BatchFetcher,
    Limit,
    draw_base_seed,
    given,
    is_iterable,
)

_ray_runtime.auth_env()  # before Ray is imported: it reads the mode then
try:
    import ray.data
    from ray.data.collate_fn import NumpyBatchCollateFn
except ImportError as exc:  # an optional extra
    raise ImportError("conformance.adapters.ray needs ray: pip install 'loaderspec[ray]'") from exc

__all__ = ["Loader"]

# The column of the rows: one index of the epoch's order each.
COLUMN = "index"


class _Fetch(NumpyBatchCollateFn):
    """Ray's `collate_fn`, run in its format threads: a batch of indices -> torch's fetch and
    collate of those items (one index alone with `batch_size=None`)."""

    def __init__(self, fetch: BatchFetcher, batched: bool) -> None:
        super().__init__()
        self.fetch, self.batched = fetch, batched

    def __call__(self, batch: Mapping[str, Any]) -> Any:
        indices = [int(i) for i in batch[COLUMN]]
        return self.fetch(indices if self.batched else indices[0])


def _batch_sampler(options: Mapping[str, Any]) -> bool:
    return options["batch_sampler"] is not None


class Loader(Adapter):
    """Ray Data's `iter_torch_batches` with torch.utils.data.DataLoader's constructor (2.13)."""

    workers_die_with = "iterator"
    loaderspec_workers: ClassVar[str] = "threads"
    loaderspec_stateful: ClassVar[bool] = False
    limits = (
        Limit(
            "an IterableDataset",
            "the adapter hands Ray Data the sampler's indices as rows; an iterable source is "
            "read by Ray tasks (from_torch), a Ray worker process per scenario",
            is_iterable,
        ),
        Limit(
            "a batch_sampler",
            "Ray Data batches the rows itself, by batch_size; iter_torch_batches takes no "
            "sampler of batches",
            _batch_sampler,
        ),
        Limit(
            "worker_init_fn",
            "Ray Data's format threads have no initialisation hook",
            given("worker_init_fn"),
        ),
        Limit(
            "persistent_workers=True",
            "Ray Data starts its prefetcher and format threads anew for every iterator",
            given("persistent_workers"),
        ),
        Limit(
            "timeout > 0",
            "iter_torch_batches has no timeout for a batch",
            given("timeout"),
        ),
        Limit(
            "multiprocessing_context",
            "Ray Data's iterator workers are threads: they have no start method",
            given("multiprocessing_context"),
        ),
        Limit(
            "pin_memory_device",
            "iter_torch_batches pins for its own device only (its `device` argument)",
            given("pin_memory_device"),
        ),
    )

    @classmethod
    def loaderspec_process_helpers(cls) -> None:
        """Join the suite run's Ray runtime, and run one epoch of one row: the driver's threads
        and connections, and what Ray Data starts at its first execution in a process (its
        usage-metrics poller thread, 6 fds of connections), serve the whole process, as a
        training script's `ray.init` and first epoch start them."""
        _ray_runtime.connect()
        for _ in ray.data.from_items([{COLUMN: 0}]).iter_batches(batch_size=1):
            pass

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        # A runtime for this process's scenarios, unless one is there: started and waited for,
        # not joined (a process that joined Ray cannot fork; the suite's harness forks each
        # scenario, and builds a loader before the first).
        _ray_runtime.prestart()

    def __iter__(self) -> Any:
        _ray_runtime.connect()
        dl = self._torch
        draw_base_seed(dl)  # torch's iterator draws it before its sampler does
        order = [int(i) for i in dl.sampler]
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        dataset = ray.data.from_items([{COLUMN: i} for i in order])
        batched = dl.batch_size is not None
        return iter(
            dataset.iter_torch_batches(
                batch_size=dl.batch_size if batched else 1,
                drop_last=dl.drop_last,
                prefetch_batches=dl.num_workers,
                collate_fn=_Fetch(BatchFetcher(dl), batched),
                device="cpu",
                pin_memory=dl.pin_memory,
            )
        )
