"""``python -m loaderspec.fakeaccel``: build (or find) the library, load it, pin one tensor.

Use it to warm the build cache before a test run (CI), or to see why it cannot be built here.
Exit status 0 when pinning works, 1 when it does not, 2 when the library cannot be built.
"""

from __future__ import annotations

import sys
import time

import torch

from loaderspec import fakeaccel


def main() -> int:
    """Build, load, check one pin; print what happened."""
    if not fakeaccel.available():
        print(f"fakeaccel: cannot build here: {fakeaccel.unavailable_reason()}", file=sys.stderr)
        return 2
    cached = fakeaccel.is_built()
    start = time.monotonic()
    device = fakeaccel.load()
    took = time.monotonic() - start
    pinned = torch.ones(4).pin_memory().is_pinned()
    how = "loaded from cache" if cached else "built and loaded"
    print(f"fakeaccel: {how} in {took:.1f} s: {fakeaccel.library_path()}")
    print(f"fakeaccel: accelerator {torch.accelerator.current_accelerator()}, pinned: {pinned}")
    return 0 if pinned and device == fakeaccel.DEVICE else 1


if __name__ == "__main__":
    sys.exit(main())
