"""`conformance.adapters.streaming:Loader`: Mosaic streaming's `StreamingDataLoader` over a
`StreamingDataset` (streaming-community, the maintained fork), behind torch's DataLoader
constructor.

A `StreamingDataset` reads samples of MDS shards (written beforehand with `MDSWriter`) and is an
IterableDataset: streaming partitions the sample ids over nodes, ranks and the workers of torch's
protocol (StreamingDataLoader is a torch DataLoader subclass) so that torch's round-robin over
the workers' batches hands out the epoch in streaming's order, and it coordinates the processes
of one machine through shared memory named after the data folder (`/dev/shm/<prefix>_locals`,
`_barrier`, `_shard_states`, ...). To grade it on the suite's map-style datasets
(conformance.adapters._front):

* at construction the adapter writes, with `MDSWriter` (no process, no network), one shard of the
  dataset's indices 0..n-1 into a folder of its own under the temp dir (streaming refuses a data
  folder that another live dataset of the machine uses), removed when the dataset is dropped
  (and, for a process that ended without finalizers, by the next loader made);
* the `StreamingDataset` subclass fetches `dataset[index]` in streaming's workers (where the
  suite's faults fire), and torch's `collate_fn` batches the samples there; streaming's
  partition of an unshuffled dataset hands out torch's sequential batches in torch's order;
* every other argument is torch's, passed through.

Checkpoint and resume are streaming's own: `state_dict()` / `load_state_dict()` of the
StreamingDataLoader (epoch, samples seen, shuffle seed). The iterator is StreamingDataLoader's
generator around torch's: dropping it closes torch's iterator (`workers_die_with = "iterator"`).

The package is imported without running `streaming/__init__.py`: that imports streaming's
vision and text datasets, hence torchvision, whose PyPI wheel is built for CUDA torch and does
not load beside torch's CPU build (`operator torchvision::nms does not exist`); the loader
(`streaming.base`) needs neither.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import types
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if "streaming" not in sys.modules:
    _spec = importlib.util.find_spec("streaming")
    if _spec is not None and _spec.submodule_search_locations is not None:
        # The package without its __init__ (see the module docstring): streaming.base only.
        _package = types.ModuleType("streaming")
        _package.__path__ = list(_spec.submodule_search_locations)
        _package.__spec__ = _spec
        sys.modules["streaming"] = _package

try:
    from streaming._version import __version__ as _streaming_version
    from streaming.base import MDSWriter, StreamingDataLoader, StreamingDataset
except ImportError as exc:  # an optional extra
    sys.modules.pop("streaming", None)
    raise ImportError(
        "conformance.adapters.streaming needs streaming-community: "
        "pip install 'loaderspec[streaming]'"
    ) from exc

from loaderspec.conformance.adapters._front import Adapter, Limit, is_iterable

# What the report's versions read (conformance.plugin), as `import streaming` would set it.
sys.modules["streaming"].__version__ = _streaming_version  # type: ignore[attr-defined]

__all__ = ["Loader"]


PREFIX = "loaderspec-streaming-"


def sweep() -> None:
    """Remove the data folders of processes that are gone: a process that ends without running
    its finalizers (os._exit, a signal) cannot remove its own."""
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        pid = folder.name.removeprefix(PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def write(n: int) -> str:
    """A new data folder holding one MDS shard of the indices 0..n-1, named after this process."""
    sweep()
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    with MDSWriter(out=folder, columns={"index": "int"}) as writer:
        for index in range(n):
            writer.write({"index": index})
    return folder


class _Samples(StreamingDataset):
    """streaming's dataset whose sample i is the user's `dataset[i]` (read in the worker)."""

    def __init__(self, dataset: Any, folder: str, batch_size: int | None) -> None:
        super().__init__(local=folder, batch_size=batch_size, shuffle=False)
        self.user_dataset = dataset

    def get_item(self, sample_id: int, retry: int = 7) -> Any:
        # What streaming's __getitem__ and __iter__ read a sample with.
        return self.user_dataset[int(super().get_item(sample_id, retry)["index"])]


def no_items(options: Mapping[str, Any]) -> bool:
    dataset = options["dataset"]
    return dataset is not None and not is_iterable(options) and len(dataset) == 0


class Loader(Adapter):
    """streaming.StreamingDataLoader with torch.utils.data.DataLoader's constructor (torch 2.13)."""

    workers_die_with = "iterator"
    limits = (
        Limit(
            "an IterableDataset",
            "streaming's StreamingDataset reads samples by id from shards written beforehand "
            "(MDSWriter); a dataset's own __iter__ cannot run in its workers",
            is_iterable,
        ),
        Limit(
            "an empty dataset",
            "StreamingDataset refuses a folder of no samples ('Stream contains no samples')",
            no_items,
        ),
        Limit(
            "batch_size=None",
            "StreamingDataset partitions its samples by the loader's batch "
            "('Please pass `batch_size` to StreamingDataset')",
            lambda o: o["batch_size"] is None and o["batch_sampler"] is None,
        ),
        Limit(
            "shuffle=True",
            "streaming shuffles with its StreamingDataset's own algorithm and seed, not with "
            "torch's sampler and generator",
            lambda o: bool(o["shuffle"]),
        ),
        Limit(
            "a sampler or batch_sampler",
            "streaming partitions the samples over ranks and workers itself; "
            "StreamingDataLoader takes no sampler",
            lambda o: o["sampler"] is not None or o["batch_sampler"] is not None,
        ),
    )

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        dl = self._torch
        folder = write(len(dataset))
        samples = _Samples(dataset, folder, dl.batch_size)
        # The folder lives as long as the dataset, which an iterator holds after the loader went.
        weakref.finalize(samples, shutil.rmtree, folder, True)
        passed = (
            *("timeout", "worker_init_fn", "multiprocessing_context", "generator"),
            *("persistent_workers", "pin_memory", "pin_memory_device", "in_order"),
            *("prefetch_factor", "drop_last", "collate_fn", "num_workers", "batch_size"),
        )
        self._streaming = StreamingDataLoader(
            samples,
            **{name: getattr(dl, name) for name in passed},  # torch's view of each
        )

    def __iter__(self) -> Any:
        return iter(self._streaming)

    def __len__(self) -> int:
        return len(self._streaming)

    def state_dict(self) -> dict[str, Any] | None:
        return self._streaming.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._streaming.load_state_dict(state)
