"""`conformance.adapters.torchdata_nodes:ThreadLoader` and `:ProcessLoader`: a torchdata.nodes
pipeline behind torch's DataLoader constructor, with `ParallelMapper(method="thread")` or
`ParallelMapper(method="process")` as its workers.

The pipeline is torchdata's own recipe for replacing a DataLoader ("Migrating to torchdata.nodes
from torch.utils.data"), built from torch's samplers (conformance.adapters._front):

    SamplerWrapper(sampler) -> Batcher(batch_size, drop_last) -> ParallelMapper(fetch + collate)
        [-> Prefetcher] [-> PinMemory] -> Loader

(a user's `batch_sampler` is wrapped directly instead of sampler + Batcher). The sampler runs in
the main process, each mapper worker fetches and collates whole batches with torch's fetcher, as
torch's workers do. What the suite measures is torchdata's: its threads or processes, queues,
ordering, shutdown and error handling.

Translated, not faked:

* `prefetch_factor`: torch keeps at most `prefetch_factor * num_workers` batches in flight. The
  mapper's `max_concurrent` may not exceed `num_workers` (default `2 * num_workers`), so 1 maps to
  `max_concurrent=num_workers`, 2 to the default, and more adds torchdata's `Prefetcher` holding
  the rest, `(prefetch_factor - 2) * num_workers` batches.
* `pin_memory`: torchdata's `PinMemory` node, added where torch would pin (an accelerator exists),
  told the current accelerator by name (torch's `pin_memory_device=""` means it; torchdata's ""
  means CUDA).
* `in_order`: the mapper's own `in_order`; `multiprocessing_context`: its start method (process).
* `num_workers=0`: `ParallelMapper(num_workers=0)`, torchdata's inline mapper.

Checkpoint and resume: `state_dict()` / `load_state_dict()` are `torchdata.nodes.Loader`'s (the
resume cases grade them).

Who owns the workers: `torchdata.nodes.Loader` keeps its current iterator (to answer
`state_dict()` at any time), and the mapper keeps its workers until its next reset or until it is
collected. Dropping an iterator does not stop them; dropping the loader does:
`workers_die_with = "loader"`, as for StatefulDataLoader (conformance.adapters.torchdata).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch

try:
    import torchdata.nodes as tn
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.torchdata_nodes needs torchdata: pip install 'loaderspec[torchdata]'"
    ) from exc

from loaderspec.conformance.adapters._front import (
    Adapter,
    BatchFetcher,
    Limit,
    draw_base_seed,
    given,
    is_iterable,
    start_method,
)

__all__ = ["ProcessLoader", "ThreadLoader"]

_COMMON_LIMITS = (
    Limit(
        "an IterableDataset with num_workers > 0",
        "ParallelMapper maps the items of one source iterated in the main process; it cannot run "
        "a copy of the dataset's __iter__ in each worker",
        lambda o: is_iterable(o) and o["num_workers"] > 0,
    ),
    Limit(
        "worker_init_fn",
        "ParallelMapper has no per-worker initialisation hook (and no get_worker_info())",
        given("worker_init_fn"),
    ),
    Limit(
        "persistent_workers=True",
        "ParallelMapper starts its workers anew at every epoch (each reset)",
        given("persistent_workers"),
    ),
    Limit(
        "timeout > 0",
        "torchdata.nodes has no timeout for a batch: nothing in the pipeline can be told one",
        given("timeout"),
    ),
)


class _NodesLoader(Adapter):
    """The torch-style front over a torchdata.nodes pipeline; `method` picks the mapper."""

    method: ClassVar[Literal["thread", "process"]]
    workers_die_with = "loader"

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        self._loader = tn.Loader(self._pipeline())

    def _pipeline(self) -> tn.BaseNode:
        dl, options = self._torch, self._options
        workers = dl.num_workers
        if is_iterable(options):  # num_workers == 0 (a limit otherwise): iterated inline
            node: tn.BaseNode = tn.IterableWrapper(dl.dataset)
            if dl.batch_size is not None:
                node = tn.Batcher(node, dl.batch_size, drop_last=dl.drop_last)
            return tn.Mapper(node, dl.collate_fn)
        if options["batch_sampler"] is not None or dl.batch_size is None:
            sampler = dl.batch_sampler if dl.batch_sampler is not None else dl.sampler
            node = tn.SamplerWrapper(sampler)
        else:
            node = tn.Batcher(tn.SamplerWrapper(dl.sampler), dl.batch_size, drop_last=dl.drop_last)
        prefetch = dl.prefetch_factor or 0
        node = tn.ParallelMapper(
            node,
            BatchFetcher(dl),
            num_workers=workers,
            in_order=dl.in_order,
            method=self.method,
            multiprocessing_context=start_method(dl.multiprocessing_context),
            max_concurrent=workers if prefetch == 1 else None,
        )
        if prefetch > 2:
            node = tn.Prefetcher(node, prefetch_factor=(prefetch - 2) * workers)
        if dl.pin_memory and torch.accelerator.is_available():
            node = tn.PinMemory(node, pin_memory_device=_pin_device(dl.pin_memory_device))
        return node

    def __iter__(self) -> Any:
        draw_base_seed(self._torch)  # as torch's iterator does, before SamplerWrapper's reset
        return iter(self._loader)

    # Checkpoint and resume: torchdata.nodes.Loader's own state_dict()/load_state_dict() (the
    # pipeline's nodes' states), passed through unchanged.
    def state_dict(self) -> dict[str, Any]:
        return self._loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._loader.load_state_dict(state)


def _pin_device(requested: str) -> str:
    """torch's `pin_memory_device=""` means the current accelerator; torchdata's PinMemory reads
    "" as CUDA, so the current accelerator is named (a privateuse1 backend, XPU, CUDA)."""
    if requested:
        return requested
    accelerator = torch.accelerator.current_accelerator()
    return "" if accelerator is None else accelerator.type


class ThreadLoader(_NodesLoader):
    """torch's DataLoader constructor over `ParallelMapper(method="thread")`."""

    method = "thread"
    limits = (
        *_COMMON_LIMITS,
        Limit(
            "multiprocessing_context",
            "thread workers have no start method",
            given("multiprocessing_context"),
        ),
    )


class ProcessLoader(_NodesLoader):
    """torch's DataLoader constructor over `ParallelMapper(method="process")`."""

    method = "process"
    limits = _COMMON_LIMITS
