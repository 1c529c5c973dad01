"""`conformance.adapters.spdl:Loader`: SPDL's `spdl.dataloader.get_pytorch_dataloader`, the
drop-in SPDL offers torch users, called with torch's DataLoader constructor.

SPDL's front already takes torch's arguments; the adapter only validates them as torch does
(conformance.adapters._front: torch's exceptions and messages for bad input) and passes torch's
meaning of the four whose defaults or spelling differ:

* `in_order`: torch's default is True, SPDL's False (completion order): passed explicitly.
* `timeout`: torch's "no timeout" is 0, SPDL's is None.
* `shuffle`: torch's None means False.
* `batch_size`: torch sets it to None when a `batch_sampler` is given; SPDL wants exactly that.

Everything else is SPDL's own: the sampler runs in the main process, a `ProcessPoolExecutor`
fetches and collates each batch, an SPDL `Pipeline` orders and buffers the results
(`prefetch_factor * num_workers`), `num_workers=0` becomes one worker process (SPDL warns), and
pinning happens where an accelerator exists. Iterating is a generator holding the pool: dropping
the iterator shuts the pool down (`workers_die_with = "iterator"`).
"""

from __future__ import annotations

import warnings
from typing import Any

try:
    from spdl.dataloader import get_pytorch_dataloader
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.spdl needs spdl: pip install 'loaderspec[spdl]'"
    ) from exc

from loaderspec.conformance.adapters._front import Adapter, Limit, given, is_iterable

from loaderspec.vocabulary import TORCH_PREFETCH_FACTOR

__all__ = ["Loader"]


class Loader(Adapter):
    """spdl.dataloader.get_pytorch_dataloader with torch.utils.data.DataLoader's constructor."""

    workers_die_with = "iterator"
    # SPDL's own words for each: get_pytorch_dataloader raises ValueError for all four.
    limits = (
        Limit(
            "an IterableDataset",
            "SPDL samples indices in the main process and fetches them in a process pool "
            "('IterableDataset is not supported.')",
            is_iterable,
        ),
        Limit(
            "worker_init_fn",
            "SPDL's pool workers run only the dataset and collate_fn "
            "('`worker_init_fn` is not supported.')",
            given("worker_init_fn"),
        ),
        Limit(
            "persistent_workers=True",
            "SPDL starts a new process pool for every iterator "
            "('`persistent_workers` is not supported.')",
            given("persistent_workers"),
        ),
        Limit(
            "pin_memory_device",
            "SPDL pins to the current accelerator only ('`pin_memory_device` is not supported.')",
            given("pin_memory_device"),
        ),
    )

    def __init__(self, dataset: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(dataset, *args, **kwargs)
        dl, options = self._torch, self._options
        with warnings.catch_warnings():
            # "`num_workers` is 0. Setting `num_workers` to 1": SPDL's documented meaning of 0.
            warnings.filterwarnings("ignore", message="`num_workers` is 0", category=UserWarning)
            self._spdl = get_pytorch_dataloader(
                dataset,
                batch_size=dl.batch_size,
                shuffle=bool(options["shuffle"]),
                sampler=options["sampler"],
                batch_sampler=options["batch_sampler"],
                num_workers=dl.num_workers,
                collate_fn=options["collate_fn"],
                pin_memory=dl.pin_memory,
                drop_last=dl.drop_last,
                timeout=dl.timeout or None,
                multiprocessing_context=dl.multiprocessing_context,
                generator=dl.generator,
                prefetch_factor=dl.prefetch_factor or TORCH_PREFETCH_FACTOR,
                in_order=dl.in_order,
            )

    def __iter__(self) -> Any:
        return iter(self._spdl)

    def __len__(self) -> int:
        return len(self._spdl)
