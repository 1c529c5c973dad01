"""The Python device module torch looks up as ``torch.fakeaccel``.

``torch.accelerator.is_available()`` and ``device_count()`` delegate to
``torch.get_device_module(<accelerator>)``: these functions answer for the one fake device.
Device-index calls (``torch.accelerator.set_device_index``, used by the DataLoader's pin-memory
thread) go through the C++ guard registered by the library, not through here.
"""

from __future__ import annotations


def is_available() -> bool:
    """The fake device is always there once the library is loaded."""
    return True


def device_count() -> int:
    """One device, index 0."""
    return 1


def current_device() -> int:
    """The only device."""
    return 0


def set_device(device: int) -> None:
    """Select the only device: a no-op. Pin threads that select their device through the backend
    module (torchdata.nodes' PinMemory, torch before torch.accelerator) call it."""
    if device != 0:
        raise ValueError(f"fakeaccel has one device, index 0; got {device}")


def is_initialized() -> bool:
    """Nothing to initialise."""
    return True


def _is_in_bad_fork() -> bool:
    # No device context exists, so a forked child may use "the device" freely.
    return False


def manual_seed_all(seed: int) -> None:
    """Nothing runs on the device; accepted so seeding code that loops over devices works."""
    del seed
