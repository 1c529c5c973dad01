"""Links from the site's pages into the checkout, checked and pointed at the source pages.

A page links to code, spec lines and conformance cases the way it would on the repository host:
by a relative path out of ``docs/`` (``[core](../reference/core.py#ProtocolCore.get_data)``,
``../spec/DataLoader.tla#MainGetData``,
``../conformance/cases/test_no_silent_loss.py#L40-L52``). This
Markdown tree processor runs before MkDocs resolves links: it rewrites each such link to the
file's page under ``source/`` (``sources.span`` gives the first line to jump to) and records the
links that do not resolve, which the build then reports as warnings (errors under ``strict``).
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from xml.etree.ElementTree import Element

from markdown import Markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

from loaderspec.docsite import sources

SOURCE_DIR = "source"  # where the source pages live in the site
# Link targets in Markdown source: inline links and images, and reference definitions. Used only
# to choose which files get a source page; the tree processor checks the links themselves.
_TARGETS = re.compile(r"\]\(\s*<?([^)\s>]+)|^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.MULTILINE)


def source_page(path: str) -> str:
    """The docs-relative Markdown path of the page that shows checkout file ``path``."""
    return f"{SOURCE_DIR}/{path}.md"


def line_anchor(line: int) -> str:
    """The id of a line on a source page (pymdownx.highlight's ``anchor_linenums``)."""
    return f"__codelineno-0-{line}"


@dataclass
class LinkState:
    """Where the checkout and the page being converted are, and the broken links found so far."""

    docs_dir: Path
    repo: Path  # the checkout's top: the folder of mkdocs.yml
    page: str = ""  # docs-relative path of the page being converted
    broken: list[str] = field(default_factory=list)

    def target(self, href: str, page: str) -> tuple[str, str] | None:
        """``(checkout path, fragment)`` if ``href`` on ``page`` leaves docs/ for the checkout.

        Raises:
            sources.LinkError: it leaves the checkout altogether.
        """
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or not parts.path or parts.path.startswith("/"):
            return None
        # normpath, not resolve: a checkout path may be a symbolic link (tests build a copy).
        target = Path(os.path.normpath(self.docs_dir / posixpath.dirname(page) / parts.path))
        if target.is_relative_to(self.docs_dir):
            return None  # a page or file of the site: MkDocs checks those
        if not target.is_relative_to(self.repo):
            raise sources.LinkError(f"{href} points outside the checkout")
        return target.relative_to(self.repo).as_posix(), parts.fragment

    def linked(self, markdown: str, page: str) -> set[str]:
        """The checkout files that ``markdown`` (of ``page``) links to, as far as a scan tells."""
        out = set()
        for match in _TARGETS.finditer(markdown):
            try:
                found = self.target(match.group(1) or match.group(2), page)
            except sources.LinkError:
                continue  # reported when the page is converted
            if found is not None:
                out.add(found[0])
        return out

    def rewrite(self, href: str) -> str | None:
        """The site link for ``href`` if it points into the checkout outside docs/, else None.

        A link that points there but does not resolve is recorded in ``broken``.
        """
        try:
            found = self.target(href, self.page)
            if found is None:
                return None
            path, fragment = found
            first = sources.span(path, fragment, self.repo).start
        except sources.LinkError as exc:
            self.broken.append(f"{self.page}: {href}: {exc}")
            return None
        page = posixpath.relpath(source_page(path), posixpath.dirname(self.page) or ".")
        return f"{page}#{line_anchor(first)}" if fragment else page


class _Rewriter(Treeprocessor):
    def __init__(self, md: Markdown, state: LinkState) -> None:
        super().__init__(md)
        self.state = state

    def run(self, root: Element) -> None:
        for element in root.iter("a"):
            new = self.state.rewrite(element.get("href", ""))
            if new is not None:
                element.set("href", new)


class CheckoutLinks(Extension):
    """Registers the rewriter ahead of MkDocs' own link processor (``relpath``, priority 0)."""

    def __init__(self, state: LinkState) -> None:
        super().__init__()
        self.state = state

    def extendMarkdown(self, md: Markdown) -> None:
        md.treeprocessors.register(_Rewriter(md, self.state), "loaderspec_checkout_links", 10)
