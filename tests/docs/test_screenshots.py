"""Headless Chromium renders the site's index and protocol pages to PNG.

The pictures are for a person to look at (``LOADERSPEC_SCREENSHOTS=DIR`` keeps them there); the
test checks that Chromium rendered each page at the asked size and that the picture is not
blank. Chromium is Debian's ``chromium`` (``scripts/setup.sh`` installs it), run without a
sandbox, GPU, network services or a profile of its own, on the built site's files.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from sitebuild import finish

WIDTH = 1280
PAGES = {"index.html": 1400, "protocol.html": 2400}  # page -> window height
CHROMIUM_TIMEOUT_S = 120
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no Chromium: run `bash scripts/setup.sh` (it installs Debian's chromium)")


def _png_size_and_colours(data: bytes) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the pixel data) of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def _render(url: str, out: Path, height: int, profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        _chromium(),
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{height}",
        f"--screenshot={out}",
        url,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = finish(proc, CHROMIUM_TIMEOUT_S)
    return subprocess.CompletedProcess(cmd, proc.returncode, output)


@pytest.mark.parametrize("page", list(PAGES))
def test_chromium_renders_the_page(site, tmp_path, page):
    assert (site / page).is_file()
    out = tmp_path / page.replace(".html", ".png")
    done = _render((site / page).as_uri(), out, PAGES[page], tmp_path / "profile")
    assert done.returncode == 0, done.stdout
    assert out.is_file(), done.stdout
    width, height, colours = _png_size_and_colours(out.read_bytes())
    assert (width, height) == (WIDTH, PAGES[page])
    assert colours > 64, "a blank picture"
    keep = os.environ.get("LOADERSPEC_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
