"""`conformance.adapters.litdata:Loader`: litdata's `StreamingDataLoader` over a
`StreamingDataset`, behind torch's DataLoader constructor.

litdata reads items by position from chunks written beforehand (its `optimize`, or a `Cache`),
and is an IterableDataset: each worker of torch's protocol (StreamingDataLoader is a torch
DataLoader subclass) reads a contiguous slice of the positions, litdata's own split
(`_associate_chunks_and_intervals_to_workers`: whole batches per worker, the rest to one), and
torch's iterator hands out the workers' batches round-robin. To grade litdata on the suite's
map-style datasets (conformance.adapters._front):

* at construction the adapter writes, with litdata's `Cache` (no process, no network), one chunk
  of dataset indices into a folder named after its content under the temp dir, laid out so that
  litdata's split and torch's round-robin hand out torch's sequential batches in torch's order
  (worker w's j-th batch holds the indices of the batch torch hands out in that turn);
* the `StreamingDataset`'s `transform` fetches `dataset[index]` in litdata's worker (where the
  suite's faults fire), and torch's `collate_fn` batches the items there;
* every other argument is torch's, passed through (`timeout`, `worker_init_fn`,
  `persistent_workers`, `multiprocessing_context`, `pin_memory`, `generator`, `in_order`).

Checkpoint and resume are litdata's own: `state_dict()` / `load_state_dict()` of the
StreamingDataLoader (samples yielded, epoch, the next worker; the dataset's state names the data
folder, which is why the folder is named after its content: a new loader over the same data
finds it). The iterator is StreamingDataLoader's generator around torch's: dropping it closes
torch's iterator (`workers_die_with = "iterator"`).

The data folders (a few hundred bytes each, one per layout) stay in the temp dir after the run:
a later loader, in this or another process, may resume from a state naming one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming.cache import Cache
    from litdata.utilities.env import _DistributedEnv
    from litdata.utilities.shuffle import _associate_chunks_and_intervals_to_workers
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.litdata needs litdata: pip install 'loaderspec[litdata]'"
    ) from exc

from loaderspec.conformance.adapters._front import Adapter, Limit, index_batches, is_iterable

__all__ = ["Loader"]


def layout(batches: Sequence[list[int]], num_workers: int, drop_last: bool) -> list[int]:
    """The dataset index to write at each position, so that litdata hands out `batches` in order.

    litdata gives worker w a contiguous slice of the positions (its own split, asked for one
    chunk of them); each worker batches its slice; torch's iterator takes the workers' batches
    round-robin, skipping a worker that has finished. So the batch handed out in turn t is
    worker w's j-th: its positions receive `batches[t]`.
    """
    items = sum(len(b) for b in batches)
    batch_size = max((len(b) for b in batches), default=1)
    _, intervals = _associate_chunks_and_intervals_to_workers(
        _DistributedEnv(1, 0, 1), [0], [(0, 0, items, items)], drop_last, num_workers, batch_size
    )
    slices = [[p for _, start, end, _ in worker for p in range(start, end)] for worker in intervals]
    per_worker = [[s[i : i + batch_size] for i in range(0, len(s), batch_size)] for s in slices]
    out = [0] * items
    turn, taken = 0, [0] * len(per_worker)
    while turn < len(batches):
        for w, worker_batches in enumerate(per_worker):
            if taken[w] < len(worker_batches) and turn < len(batches):
                for position, index in zip(worker_batches[taken[w]], batches[turn], strict=True):
                    out[position] = index
                taken[w] += 1
                turn += 1
    return out


def write(indices: list[int]) -> str:
    """A litdata data folder holding `indices` (one chunk), named after its content."""
    key = hashlib.sha256(repr(indices).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / "loaderspec-litdata"
    folder = root / key
    if (folder / "index.json").exists():
        return str(folder)
    root.mkdir(exist_ok=True)
    # Written beside, then renamed: another process writing the same layout loses the race
    # harmlessly, and a reader never sees a half-written folder.
    scratch = tempfile.mkdtemp(dir=root)
    cache = Cache(scratch, chunk_size=max(1, len(indices)))
    for position, index in enumerate(indices):
        cache[position] = index
    cache.done()
    cache.merge()
    try:
        os.rename(scratch, folder)
    except OSError:  # the same layout was written meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
    return str(folder)


class _Fetch:
    """litdata's per-item `transform`, run in its workers: the written index -> `dataset[index]`."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __call__(self, index: int) -> Any:
        return self.dataset[int(index)]


def no_batches(options: Mapping[str, Any]) -> bool:
    """A map-style epoch of no batches: no items, or fewer than one batch with drop_last."""
    dataset, batch_size = options["dataset"], options["batch_size"] or 1
    if dataset is None or is_iterable(options):
        return False
    return len(dataset) == 0 or (bool(options["drop_last"]) and len(dataset) < batch_size)


class Loader(Adapter):
    """litdata.StreamingDataLoader with torch.utils.data.DataLoader's constructor (torch 2.13)."""

    workers_die_with = "iterator"
    limits = (
        Limit(
            "an IterableDataset",
            "litdata's StreamingDataset reads items by position from chunks written beforehand "
            "(optimize); a dataset's own __iter__ cannot run in its workers",
            is_iterable,
        ),
        Limit(
            "an epoch of no batches",
            "litdata's writer never finishes a dataset of no items (Cache.merge waits for an "
            "index that no chunk writes)",
            no_batches,
        ),
        Limit(
            "batch_size=None",
            "StreamingDataLoader batches always (it asserts a batch_size)",
            lambda o: o["batch_size"] is None and o["batch_sampler"] is None,
        ),
        Limit(
            "shuffle=True",
            "litdata shuffles with its StreamingDataset's own seed (chunks, then items within "
            "one), not with torch's sampler and generator",
            lambda o: bool(o["shuffle"]),
        ),
        Limit(
            "a sampler or batch_sampler",
            "litdata decides the order itself (each worker reads a contiguous slice); "
            "StreamingDataLoader takes no sampler",
            lambda o: o["sampler"] is not None or o["batch_sampler"] is not None,
        ),
    )

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        dl, options = self._torch, self._options
        batches = list(index_batches(dl))
        folder = write(layout(batches, max(1, dl.num_workers), dl.drop_last))
        passed = (
            *("timeout", "worker_init_fn", "multiprocessing_context", "generator"),
            *("persistent_workers", "pin_memory", "pin_memory_device", "in_order"),
        )
        self._litdata = StreamingDataLoader(
            StreamingDataset(folder, transform=_Fetch(dataset)),
            batch_size=dl.batch_size,
            num_workers=dl.num_workers,
            prefetch_factor=dl.prefetch_factor,
            drop_last=dl.drop_last,
            collate_fn=dl.collate_fn,
            **{name: options[name] for name in passed},
        )

    def __iter__(self) -> Any:
        return iter(self._litdata)

    def __len__(self) -> int:
        return len(self._litdata)

    def state_dict(self) -> dict[str, Any]:
        return self._litdata.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._litdata.load_state_dict(state)
