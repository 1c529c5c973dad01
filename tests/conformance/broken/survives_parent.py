"""Bug: each worker starts a non-daemon thread that never ends, so a worker whose parent died
never exits, whatever its state (NoOrphanWorkers). Built on torch's DataLoader."""

import threading
from typing import Any

from torch.utils.data import DataLoader

_FOREVER = threading.Event()


def _pin_worker_alive(user: Any, worker_id: int) -> None:
    threading.Thread(target=_FOREVER.wait, daemon=False).start()  # the bug
    if user is not None:
        user(worker_id)


class _Init:
    def __init__(self, user: Any) -> None:
        self.user = user

    def __call__(self, worker_id: int) -> None:
        _pin_worker_alive(self.user, worker_id)


class Loader(DataLoader):
    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        kwargs["worker_init_fn"] = _Init(kwargs.get("worker_init_fn"))
        super().__init__(dataset, **kwargs)
