"""A loader that delegates to the reference loader; subclasses override one thing.

Iterators are classes, not generators: a generator ends at its first exception, which would add a
second bug ("stops after an error") to every wrapper.
"""

from __future__ import annotations

from typing import Any

from loaderspec.reference import DataLoader as Reference


class Relay:
    """The wrapper's iterator: hands out what the reference iterator gives."""

    def __init__(self, loader: Wrapped, it: Any) -> None:
        self.loader, self.it = loader, it

    def __iter__(self) -> Relay:
        return self

    def __next__(self) -> Any:
        return next(self.it)


class Wrapped:
    """Takes torch's arguments, builds the reference loader, iterates through ``relay``."""

    relay: type[Relay] = Relay

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        self.inner = Reference(dataset, **self.adjust(kwargs))

    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Relay:
        return self.relay(self, iter(self.inner))
