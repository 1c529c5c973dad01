"""Bug: a worker puts each batch's name in a /dev/shm segment it creates, and only the main process
unlinks it, on receipt; a worker killed between the two leaves the segment (ShutdownCompletes)."""

import itertools
import os
from typing import Any

from broken._wrap import Relay, Wrapped

_SHM = "/dev/shm"
_count = itertools.count()


class _SegmentCollate:
    """Creates a named segment for the batch, then collates it (the order of a loader that
    allocates the batch's shared memory first); the segment's name travels with the batch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, batch: list[Any]) -> Any:
        name = f"{_SHM}/broken-shm-{os.getpid()}-{next(_count)}"
        os.close(os.open(name, os.O_CREAT | os.O_RDWR, 0o600))
        return (name, self.inner(batch))


class _Unlinks(Relay):
    def __next__(self) -> Any:
        name, batch = next(self.it)
        os.unlink(name)  # the only place the segment goes: a killed worker's stays for ever
        return batch


class Loader(Wrapped):
    relay = _Unlinks

    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        from torch.utils.data import default_collate

        return {
            **kwargs,
            "collate_fn": _SegmentCollate(kwargs.get("collate_fn") or default_collate),
        }
