"""The documentation site: it builds with warnings as errors, every page is reachable from the
index, every link and anchor resolves, nothing comes from another host, a broken link into the
checkout fails the build, and the diagrams are drawn from the code."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit

from sitebuild import TOP, Page, broken_links, good_links

from loaderspec.docsite import examples, statediagram
from loaderspec.vocabulary import PROPERTIES, Action


def _internal(page: str, href: str) -> tuple[str, str] | None:
    """(site path, fragment) of a link within the site, or None for another host or scheme."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page), unquote(parts.path)))
    return (page if not parts.path else path), unquote(parts.fragment)


def test_site_builds_with_warnings_as_errors(builds):
    site, _ = builds
    assert site.returncode == 0, site.output
    assert "WARNING" not in site.output
    assert re.search(r"^strict: true$", (TOP / "mkdocs.yml").read_text(), re.MULTILINE)


def test_every_page_is_reachable_from_the_index(parsed):
    pages = parsed
    seen, todo = {"index.html"}, ["index.html"]
    while todo:
        page = todo.pop()
        for href in pages[page].links:
            target = _internal(page, href)
            if target and target[0] in pages and target[0] not in seen:
                seen.add(target[0])
                todo.append(target[0])
    unreachable = sorted(set(pages) - seen)
    assert unreachable == [], "pages no link leads to from index.html"
    assert len(seen) > 40  # the hand-written pages, the API pages and the source pages


def test_every_link_and_anchor_in_the_site_resolves(site, parsed):
    pages = parsed
    broken = []
    for page, parsed in pages.items():
        for href in parsed.links:
            target = _internal(page, href)
            if target is None:
                continue
            path, fragment = target
            if not (site / path).exists():
                broken.append(f"{page}: {href} (no file {path})")
            elif fragment and path.endswith(".html") and fragment not in pages[path].ids:
                broken.append(f"{page}: {href} (no id {fragment!r} in {path})")
    assert broken == []


def test_nothing_is_loaded_from_another_host(site, parsed):
    remote = [
        f"{page}: {src}"
        for page, found in parsed.items()
        for src in found.assets
        if urlsplit(src).scheme in ("http", "https") or src.startswith("//")
    ]
    assert remote == []
    # Material loads mermaid.js from a CDN when a page has a mermaid diagram: none may.
    assert not [p for p in site.rglob("*.html") if 'class="mermaid"' in p.read_text()]
    imports = [
        p.name
        for p in site.rglob("*.css")
        if re.search(r"url\(\s*[\"']?(https?:)?//", p.read_text())
    ]
    assert imports == []


def test_a_broken_link_into_the_checkout_fails_the_build(builds):
    _, broken = builds
    assert broken.returncode != 0, "a site with broken links built"
    for href in good_links():
        assert not re.search(re.escape(href) + r"(?![\w.-])", broken.output), href
    for href, why in broken_links().items():
        lines = [line for line in broken.output.splitlines() if href in line]
        assert any(why in line for line in lines), f"{href}:\n{broken.output[-3000:]}"


def test_the_state_diagram_shows_every_transition_of_the_core(site):
    for table in statediagram.core_tables():
        svg = (site / "diagrams" / f"{table.name}.svg").read_text()
        for state, row in table.transitions.items():
            assert f">{statediagram.state_label(state)}<" in svg
            for action in row:
                assert f">{statediagram.action_label(action)}<" in svg


def test_each_example_run_is_drawn_with_what_it_must_show(site):
    for example in examples.EXAMPLES:
        svg = (site / "diagrams" / f"{example.slug}.svg").read_text()
        for action in example.shows:
            assert re.search(rf">{action}( [^<]*)?<", svg), f"{example.slug}: no {action}"


def test_the_protocol_page_links_each_action_to_spec_core_and_cases(site):
    page = Page()
    page.feed((site / "protocol.html").read_text())
    missing = [a.value for a in Action if a.value not in page.ids]
    missing += [p.name for p in PROPERTIES if p.name not in page.ids]
    assert missing == []
    links = " ".join(page.links)
    assert "source/spec/DataLoader.tla.html#__codelineno-0-" in links
    assert "source/reference/core.py.html#__codelineno-0-" in links
    assert "source/conformance/cases/test_" in links
