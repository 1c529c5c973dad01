"""The reference loader: ``from reference import DataLoader``: torch 2.13 API, spec protocol.

``reference.core`` is the protocol as a pure state machine, ``reference.shell`` the processes and
pipes that drive it, ``reference.tracing`` the opt-in trace records. ``get_worker_info`` is
torch's own: inside a reference worker, ``torch.utils.data.get_worker_info()`` works as usual.
"""

from torch.utils.data import get_worker_info

from reference.loader import DataLoader

__all__ = ["DataLoader", "get_worker_info"]
