"""`conformance.adapters.torchdata:Loader`: torchdata's StatefulDataLoader, with its semantics
stated.

StatefulDataLoader takes torch's constructor (plus `snapshot_every_n_steps`) and runs torch's
worker protocol, so no bridging is needed: `Loader` *is* a StatefulDataLoader. What differs is who
owns the workers. To be able to `state_dict()` at any time, the loader keeps its current iterator
in itself (`__iter__` stores it, with or without persistent workers). Dropping the iterator
(`del it`, a `break` out of a `for`) therefore does not shut the workers down; they live until the
iterator finishes (StopIteration), the next `iter(loader)` replaces it, or the loader itself is
dropped. `Loader.workers_die_with == "loader"` says so to the suite: its early-drop cases drop the
loader as well as the iterator, and report the difference instead of a leak.
"""

from __future__ import annotations

from typing import ClassVar, Literal

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError as exc:  # an optional extra
    raise ImportError(
        "conformance.adapters.torchdata needs torchdata: pip install 'loaderspec[torchdata]'"
    ) from exc

__all__ = ["Loader"]


class Loader(StatefulDataLoader):
    """torchdata.stateful_dataloader.StatefulDataLoader, unchanged (torch's constructor)."""

    # "iterator": dropping the iterator stops its workers (torch's DataLoader, the reference).
    # "loader": only dropping the loader does (the loader keeps its iterator).
    workers_die_with: ClassVar[Literal["iterator", "loader"]] = "loader"
