"""The site's prose pages read at 1280 px without scrolling sideways: headless Chromium lays each
out in a 1280 px frame (all of them in one Chromium run); the page is no wider than the frame,
and no code block or table inside it scrolls sideways on its own (docs/css/loaderspec.css wraps
them)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

WIDTH = 1280
PAGES = (
    "index",
    "getting-started",
    "conformance",
    "faultinject",
    "tracecheck",
    "reference",
    "conformance-matrix",
)
# For each frame: its page's scrollWidth and the elements in it that scroll sideways.
PROBE = """<!doctype html><body>{frames}<script>
window.addEventListener('load', () => {{
  const out = {{}};
  for (const f of document.querySelectorAll('iframe')) {{
    const d = f.contentDocument, w = f.contentWindow;
    const wide = [...d.querySelectorAll('.md-content *')].filter(e => {{
      const s = w.getComputedStyle(e);
      return ['auto', 'scroll'].includes(s.overflowX) && e.scrollWidth > e.clientWidth + 1;
    }}).map(e => e.tagName + ' ' + (e.textContent || '').trim().slice(0, 60));
    out[f.dataset.page] = [d.documentElement.scrollWidth, wide];
  }}
  document.body.setAttribute('data-out', JSON.stringify(out));
}});
</script></body>"""


@pytest.fixture(scope="module")
def layouts(site: Path) -> dict[str, list]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no Chromium: run `bash scripts/setup.sh` (it installs Debian's chromium)")
    frames = "".join(
        f'<iframe data-page="{p}" src="{p}.html" width="{WIDTH}" height="900"></iframe>'
        for p in PAGES
    )
    probe = site / "_width_probe.html"
    probe.write_text(PROBE.format(frames=frames))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    flags.append("--allow-file-access-from-files")  # the probe reads its frames' documents
    done = subprocess.run(
        [chromium, *flags, f"--window-size={WIDTH + 40},900", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    probe.unlink()
    assert 'data-out="' in done.stdout, done.stderr[-2000:]
    raw = done.stdout.split('data-out="', 1)[1].split('"', 1)[0]
    return json.loads(raw.replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.parametrize("page", PAGES)
def test_a_prose_page_does_not_scroll_sideways_at_1280_px(layouts: dict, page: str) -> None:
    width, wide = layouts[page]
    assert width <= WIDTH
    assert wide == [], f"scroll sideways: {wide}"
