"""Bug: len() promises one batch more than an epoch hands out (ExactlyOnce)."""

from broken._wrap import Wrapped


class Loader(Wrapped):
    def __len__(self) -> int:
        return len(self.inner) + 1
