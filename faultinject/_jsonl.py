"""Append-only JSON-lines files that survive the writer being SIGKILLed.

One `os.write` per record on an `O_APPEND` descriptor: the kernel appends it atomically with
respect to other writers of the same file, and the bytes are in the page cache the moment the call
returns, so a record written just before a fault kills the process is never lost. No buffering, no
locks; this module knows nothing about what the records mean.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["append", "read_all"]


def append(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append `record` as one JSON line to `path` (created if missing)."""
    line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_all(directory: str | os.PathLike[str], pattern: str) -> list[dict[str, Any]]:
    """Every record of every file matching `pattern` in `directory`, in file then line order.

    A torn last line (a writer killed mid-write, which `append` makes very unlikely) is skipped.
    """
    records: list[dict[str, Any]] = []
    for path in sorted(Path(directory).glob(pattern)):
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
