"""Bug: every worker re-seeds torch with 0 before the user's worker_init_fn (TypeOK: seeds are
base_seed + worker_id, distinct per worker; J1 pytorch/pytorch#5059)."""

from typing import Any

import torch

from broken._wrap import Wrapped


class _Reseed:
    def __init__(self, user: Any) -> None:
        self.user = user

    def __call__(self, worker_id: int) -> None:
        torch.manual_seed(0)
        if self.user is not None:
            self.user(worker_id)


class Loader(Wrapped):
    def adjust(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "worker_init_fn": _Reseed(kwargs.get("worker_init_fn"))}
