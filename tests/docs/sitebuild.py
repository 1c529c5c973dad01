"""Building the documentation site for the tests, and reading the HTML it produced.

``start``/``finish`` run ``mkdocs build --strict`` in a subprocess, bounded and, on timeout,
killed with its children by pid. ``broken_site`` writes a small site with the real site's
configuration whose one page links into the checkout correctly (``good_links``) and wrongly
(``broken_links``). ``pages_of`` parses every page of a built site.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 300
# The checkout folders the small site links into (symbolic links beside its mkdocs.yml).
SOURCE_FOLDERS = ("spec", "reference", "conformance", "faultinject", "loaderspec", "bench")


def _a_case() -> tuple[str, str]:
    from loaderspec.docsite import pages

    return pages.cases_by_property()["PrefetchBound"][0]  # (file, case), whatever they are now


def _core_method() -> str:
    from loaderspec.docsite import pages
    from loaderspec.vocabulary import CORE_METHOD, Action

    return pages.core_methods()[CORE_METHOD[Action.MAIN_TRY_PUT_INDEX]]


def good_links() -> list[str]:
    """Links into the checkout as the pages write them, to things that exist today."""
    file, case = _a_case()
    return [
        f"../reference/core.py#{_core_method()}",
        "../spec/DataLoader.tla#MainTryPutIndex",
        "../spec/DataLoader.tla#L1-L3",
        f"../conformance/cases/{file}#{case}",
    ]


def broken_links() -> dict[str, str]:
    """Links into the checkout that do not resolve -> what the build must say about each."""
    file, _ = _a_case()
    return {
        f"../reference/core.py#{_core_method()}_no_such_method": "no such definition",
        "../spec/DataLoader.tla#L99999": "the file has lines",
        "../spec/DataLoader.tla#MainNoSuchAction": "no such definition",
        f"../conformance/cases/{file}#test_no_such_case": "no such definition",
        "../reference/no_such_module.py": "not a published source file",
    }


@dataclass(frozen=True)
class Build:
    site: Path
    returncode: int
    output: str


def start(config: Path, site: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2.0
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.Popen(
        cmd, cwd=config.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """Wait up to ``timeout_s`` for ``proc``; past that, kill it and its children by pid.
    Returns its output."""
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        from loaderspec.faultinject.processes import kill_tree

        kill_tree(proc.pid)
        output, _ = proc.communicate()
        output += f"\n(killed after {timeout_s} s)"
    return output


def finish_build(proc: subprocess.Popen[str], site: Path) -> Build:
    output = finish(proc, BUILD_TIMEOUT_S)
    return Build(site, proc.returncode, output)


def broken_site(root: Path) -> Path:
    """The site's configuration and one page with ``good_links()`` and ``broken_links()`` into
    the checkout; returns its mkdocs.yml."""
    config = (TOP / "mkdocs.yml").read_text()
    (root / "mkdocs.yml").write_text(config.split("\nnav:\n", 1)[0] + "\nnav:\n  - index.md\n")
    for folder in SOURCE_FOLDERS:
        (root / folder).symlink_to(TOP / folder)
    (root / "docs" / "css").mkdir(parents=True)
    shutil.copy(TOP / "docs" / "css" / "loaderspec.css", root / "docs" / "css")
    links = [*good_links(), *broken_links()]
    page = "# Links into the checkout\n\n" + "".join(
        f"- [link {n}]({h})\n" for n, h in enumerate(links)
    )
    (root / "docs" / "index.md").write_text(page)
    return root / "mkdocs.yml"


class Page(HTMLParser):
    """The ids of a page, its links (``<a href>``) and the assets it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag in ("script", "img", "iframe", "source") and a.get("src"):
            self.assets.append(a["src"])
        if tag == "link" and a.get("href"):
            self.assets.append(a["href"])


def pages_of(site: Path) -> dict[str, Page]:
    out = {}
    for path in site.rglob("*.html"):
        if path.name == "404.html":
            continue  # links from the site's root, wherever the 404 is served: not checkable here
        parser = Page()
        parser.feed(path.read_text())
        out[path.relative_to(site).as_posix()] = parser
    return out
