"""MkDocs hooks (``mkdocs.yml``: ``hooks:``): the glue between the build and the generators.

* ``on_config``: adds the checkout-link checker (``links.CheckoutLinks``) to Markdown.
* ``on_files``: records the example runs the pages ask for and draws them as sequence
  diagrams, draws the core's state diagrams, replaces each ``<!-- docsite: NAME ARGS -->`` line
  of every page by what ``pages`` generates (an HTML comment, so the page still reads on the
  repository host), and adds a source page for every checkout file the pages link to, with
  their index.
* ``on_page_markdown``: puts the expansions in the page.
* ``on_page_content``: reports each link into the checkout that did not resolve as a warning,
  which fails a ``strict`` build, and lets MkDocs' anchor check see the source pages' lines.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

from loaderspec.docsite import examples, links, pages, sequence, sources, statediagram
from loaderspec.traces import IteratorTrace
from loaderspec.vocabulary import Actor

log = logging.getLogger("mkdocs.hooks.loaderspec")
DIRECTIVE = re.compile(r"^<!-- docsite: ([a-z-]+)((?: [^\s]+)*) -->$", re.MULTILINE)
_ID = re.compile(r'\bid="([^"]+)"')
DIAGRAMS = "diagrams"
REPORTS = "reports"  # docs/reports/<loader>/report.json, made by `loaderspec report`

_links: links.LinkState | None = None
_expanded: dict[tuple[str, str], str] = {}  # (page src_uri, directive line) -> its Markdown


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    global _links
    repo = Path(config.config_file_path).parent
    _links = links.LinkState(Path(config.docs_dir), repo)
    config.markdown_extensions.append(links.CheckoutLinks(_links))
    return config


def _record(used: list[tuple[str, list[str]]]) -> dict[str, IteratorTrace]:
    runs: dict[str, IteratorTrace] = {}
    for name, args in used:
        if name != "example":
            continue
        example = examples.BY_SLUG.get(args[0] if args else "")
        if example is None:
            raise PluginError(f"docsite example {args}: known ones are {sorted(examples.BY_SLUG)}")
        if example.slug not in runs:
            runs[example.slug] = examples.record(example)
    return runs


def on_files(files: Files, config: MkDocsConfig) -> Files:
    # A generator's error (no Graphviz, a core method the vocabulary names is gone, no reports,
    # an example that did not show its story) says what is wrong and the fix: one line, as
    # MkDocs prints a PluginError, not a traceback.
    try:
        return _add_files(files, config)
    except (LookupError, RuntimeError) as exc:
        raise PluginError(f"loaderspec.docsite: {exc}") from exc


def _add_files(files: Files, config: MkDocsConfig) -> Files:
    assert _links is not None, "on_config runs first"
    docs = files.documentation_pages()
    used = [
        (m.group(1), m.group(2).split()) for f in docs for m in DIRECTIVE.finditer(f.content_string)
    ]
    runs = _record(used)
    for slug, run in runs.items():
        svg = sequence.render(run, examples.BY_SLUG[slug].title)
        files.append(File.generated(config, f"{DIAGRAMS}/{slug}.svg", content=svg))
    if any(name == "state-diagrams" for name, _ in used):
        for table in statediagram.core_tables():
            svg = statediagram.render_svg(statediagram.to_dot(table))
            files.append(File.generated(config, f"{DIAGRAMS}/{table.name}.svg", content=svg))

    _expanded.clear()
    linked: set[str] = set()
    for f in docs:
        linked |= _links.linked(f.content_string, f.src_uri)
        for m in DIRECTIVE.finditer(f.content_string):
            text = _expand(m.group(1), m.group(2).split(), f.src_uri, config, runs)
            _expanded[f.src_uri, m.group(0)] = text
            linked |= _links.linked(text, f.src_uri)
    published = sorted(linked & set(sources.published_files(_links.repo)))
    for path in published:
        # Reached from the links to them and from the source index, not from the nav.
        page = File.generated(
            config,
            links.source_page(path),
            content=pages.source_page(_links.repo / path, path),
            inclusion=InclusionLevel.NOT_IN_NAV,
        )
        files.append(page)
    index = pages.source_index(published, "")
    files.append(File.generated(config, f"{links.SOURCE_DIR}/index.md", content=index))
    return files


def _state_diagrams(page_dir: str, up: str) -> str:
    out = []
    for table in statediagram.core_tables():
        src = posixpath.relpath(f"{DIAGRAMS}/{table.name}.svg", page_dir)
        out.append(
            f"![The core's {table.name}]({src})\n\n"
            f"*Drawn at build time from [`{table.name}`]({up}{statediagram.TABLES_SOURCE}"
            f"#{table.name}). A box with a double border has no way out.*"
        )
    return "\n\n".join(out)


def _example(slug: str, run: IteratorTrace, page_dir: str) -> str:
    example = examples.BY_SLUG[slug]
    src = posixpath.relpath(f"{DIAGRAMS}/{slug}.svg", page_dir)
    order = ", ".join(map(str, examples.handed_out(run))) or "nothing"
    return (
        f"![{example.title}]({src})\n\n"
        f"*{example.title}. Recorded from the reference loader during this build:"
        f" {len(run.records)} records; handed out: {order}. Left: milliseconds since the first"
        " record; `#n`: task n; `(wk)`: worker k.*"
    )


def _expand(name: str, args: list[str], src: str, config: MkDocsConfig, runs: dict) -> str:
    page_dir = posixpath.dirname(src)
    up = "../" * (src.count("/") + 1)  # from the page to the checkout's top
    if name == "state-diagrams" and not args:
        return _state_diagrams(page_dir, up)
    if name == "example" and len(args) == 1 and args[0] in runs:
        return _example(args[0], runs[args[0]], page_dir)
    if name == "actions" and len(args) == 1 and args[0] in {a.value for a in Actor}:
        return pages.actions(Actor(args[0]), up)
    if name == "properties" and not args:
        return pages.properties(up)
    if name == "matrix" and not args:
        reports = Path(config.docs_dir) / REPORTS
        return pages.matrix(reports, up, posixpath.relpath(REPORTS, page_dir or ".") + "/")
    if name == "api" and args:
        return pages.api(args[0], skip=args[1:])
    raise PluginError(
        f"{src}: unknown docsite directive {name!r} {args} (known: state-diagrams,"
        " example SLUG, actions ACTOR, properties, matrix, api PACKAGE [SKIP ...])"
    )


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    assert _links is not None
    _links.page = src = page.file.src_uri
    return DIRECTIVE.sub(lambda m: _expanded[src, m.group(0)], markdown)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    assert _links is not None
    if page.file.src_uri.startswith(f"{links.SOURCE_DIR}/") and page.present_anchor_ids is not None:
        # pymdownx.highlight writes the line anchors as HTML that MkDocs does not look into:
        # add them, so that MkDocs' anchor check covers links to lines too.
        page.present_anchor_ids |= set(_ID.findall(html))
    for problem in _links.broken:
        log.warning("broken link into the checkout: %s", problem)
    _links.broken.clear()
    return html
