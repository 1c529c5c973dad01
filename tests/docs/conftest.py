"""Builds the documentation site once per session, and beside it a small site with the same
configuration whose one page links into the checkout correctly and wrongly (``sitebuild``).
Both builds run at once: each spends much of its time waiting on processes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from sitebuild import TOP, Build, broken_site, finish_build, pages_of, start


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Build, Build]:
    """(the site, the small site with broken links), built side by side."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail(
            "MkDocs is not installed: run `bash scripts/test.sh` (it asks for the docs extra)"
        )
    tmp = tmp_path_factory.mktemp("docs")
    small = tmp / "broken-src"
    small.mkdir()
    procs = [
        (start(TOP / "mkdocs.yml", tmp / "site"), tmp / "site"),
        (start(broken_site(small), tmp / "broken-site"), tmp / "broken-site"),
    ]
    site, broken = (finish_build(proc, out) for proc, out in procs)
    return site, broken


@pytest.fixture(scope="session")
def site(builds: tuple[Build, Build]) -> Path:
    build = builds[0]
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.output}"
    return build.site


@pytest.fixture(scope="session")
def parsed(site: Path) -> dict:
    """Every HTML page of the built site, parsed (``sitebuild.Page``)."""
    return pages_of(site)
