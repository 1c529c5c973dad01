"""Bug: a worker's exception reaches the user as a RuntimeError whose message names the original
type ("Caught ValueError ... boom"), not as that type (IterationTerminates: `except ValueError`
in the user's loop no longer catches it)."""

from typing import Any

from broken._wrap import Relay, Wrapped


class _Wrap(Relay):
    def __next__(self) -> Any:
        try:
            return next(self.it)
        except (StopIteration, RuntimeError):
            raise
        except Exception as exc:
            raise RuntimeError(f"Caught {type(exc).__name__} in a worker: {exc}") from None


class Loader(Wrapped):
    relay = _Wrap
