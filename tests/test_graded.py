"""One list of graded loaders (`loaderspec.graded`), and the docs' "Adding a ..." file lists.

The registry is the only place that lists the adapters: no other module spells two of them, the
docs' adapter table and the extras agree with it, and `python -m loaderspec.graded` prints what
scripts/matrix.sh runs. Each "Adding a ..." section of the docs ends in a "Files: N" line naming
exactly the files to touch; every file, folder and test the section names exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from loaderspec import graded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# The folders whose modules and scripts read the list instead of spelling it.
SOURCE_DIRS = ("loaderspec", "conformance", "faultinject", "reference", "bench", "scripts")
REF = re.compile(r"adapters\.(\w+:\w+)")
ADDING = {
    "Adding a property": ROOT / "docs" / "spec.md",
    "Adding a fault kind": ROOT / "docs" / "spec.md",
    "Adding an adapter": ROOT / "docs" / "conformance.md",
}


def adapter_refs(text: str) -> set[str]:
    """The graded adapters' "module:Class" (inside conformance.adapters) that `text` names."""
    known = {g.loader.rsplit(".", 1)[-1] for g in graded.ADAPTERS}
    return set(REF.findall(text)) & known


def hand_lists(root: Path) -> dict[str, set[str]]:
    """Files under `root`'s source folders (not the registry) that name two or more adapters."""
    found = {}
    for folder in SOURCE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".py", ".sh") or path == root / "loaderspec" / "graded.py":
                continue
            refs = adapter_refs(path.read_text())
            if len(refs) > 1:
                found[str(path.relative_to(root))] = refs
    return found


def test_no_module_but_the_registry_lists_the_adapters():
    assert hand_lists(ROOT) == {}, "read loaderspec.graded instead"


def test_a_hand_list_is_found(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "mine.py").write_text(
        'A = "loaderspec.conformance.adapters.spdl:Loader"\n'
        'B = "loaderspec.conformance.adapters.grain:Loader"\n'
    )
    assert hand_lists(tmp_path) == {"bench/mine.py": {"spdl:Loader", "grain:Loader"}}


def test_the_docs_adapter_table_is_the_registry():
    section = (ROOT / "docs" / "conformance.md").read_text().split("## Adapters and their limits")
    rows = [r for r in section[1].splitlines() if r.startswith("| `conformance.adapters.")]
    by_ref = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        by_ref[cells[0].strip("`").split(".")[-1]] = cells[1]
    assert set(by_ref) == {g.loader.rsplit(".", 1)[-1] for g in graded.ADAPTERS}
    for g in graded.ADAPTERS:
        extra = by_ref[g.loader.rsplit(".", 1)[-1]]
        assert extra.startswith(f"`{g.extra}`, {g.distribution} "), (g.name, extra)
        assert ("(own virtualenv)" in extra) == g.own_venv, (g.name, extra)


def test_each_adapter_has_its_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for g in graded.ADAPTERS:
        assert g.extra in extras, g.name
        assert any(req.startswith(f"{g.distribution}=") for req in extras[g.extra]), g.name


def test_the_names_are_one_each_and_named_finds_them():
    names = [g.name for g in graded.LOADERS]
    assert len(set(names)) == len(names)
    assert len({g.loader for g in graded.LOADERS}) == len(names)
    assert graded.named("litdata").own_venv
    with pytest.raises(KeyError, match="one of reference, torch"):
        graded.named("nope")


def test_matrix_lists(capsys):
    graded.main(["loaders"])
    loaders = capsys.readouterr().out.split()
    assert sorted(loaders) == sorted(g.loader for g in graded.LOADERS)
    assert loaders[0] == graded.named("grain").loader  # the slowest starts first
    graded.main(["pythons"])
    assert capsys.readouterr().out.split() == [
        f"{g.loader}=.venv-{g.extra}/bin/python" for g in graded.ADAPTERS if g.own_venv
    ]
    graded.main(["extras"])
    assert capsys.readouterr().out.split() == ["torchdata", "spdl", "grain", "paddle"]


# --------------------------------------------------------------------------- "Adding a ..."


def section(title: str) -> str:
    text = ADDING[title].read_text()
    start = re.search(rf"^(#+) {re.escape(title)}\n", text, re.M)
    assert start, f"{ADDING[title].name} has no section {title!r}"
    end = re.compile(rf"^#{{1,{len(start.group(1))}}} ", re.M).search(text, start.end())
    return text[start.end() : end.start() if end else len(text)]


def paths(text: str) -> list[str]:
    """The repository paths `text` names in backticks (a file, `<placeholder>` included, or a
    folder ending in /)."""
    return re.findall(r"`([\w.<>/-]+(?:\.(?:py|tla|toml|md|sh)|/))`", text)


def exists(path: str) -> bool:
    if "<" in path:  # a file to create: its folder exists
        return (ROOT / path).parent.is_dir()
    if "/" not in path:  # a file named alone: at the top, or in a source or test folder
        folders = [ROOT / f for f in (*SOURCE_DIRS, "spec", "tests", "docs")]
        return (ROOT / path).exists() or any(any(f.rglob(path)) for f in folders)
    return (ROOT / path).exists()


def files_line(title: str) -> tuple[int, list[str]]:
    found = re.search(r"^Files: (\d+)(.*?)(?:\n\n|\Z)", section(title), re.M | re.S)
    assert found, f"{title!r} ends in no 'Files: N' line"
    return int(found.group(1)), paths(found.group(2))


@pytest.mark.parametrize("title", list(ADDING))
def test_each_adding_section_names_files_that_exist(title):
    text = section(title)
    missing = [p for p in paths(text) if not exists(p)]
    assert not missing, f"{title!r} names what is not there: {missing}"
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    for name in re.findall(r"`(test_\w+)`", text):
        assert f"def {name}(" in tests, f"{title!r} names {name}, which no test defines"


@pytest.mark.parametrize("title", list(ADDING))
def test_each_adding_section_counts_its_files(title):
    count, named = files_line(title)
    # "Files: N" names the N files every addition touches, then the ones where needed
    assert len(set(named[:count])) == count, (title, named)
    assert all(p in paths(section(title).split("\nFiles: ")[0]) for p in named), (title, named)


def test_adding_an_adapter_touches_the_registry():
    count, named = files_line("Adding an adapter")
    assert "loaderspec/graded.py" in named[:count]
    # the registry is the one list: no step edits another module's list of loaders
    assert not {"loaderspec/report.py", "conformance/plugin.py", "bench/loaders.py"} & set(named)


def test_the_docs_name_the_registrys_extras_and_virtualenvs():
    """A docs page's setup line for every loader's extra names exactly the registry's extras
    (in any order), and the own virtualenvs it names are the registry's."""
    extras = {g.extra for g in graded.ADAPTERS if not g.own_venv}
    own = {g.extra for g in graded.ADAPTERS if g.own_venv}
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        for line in re.findall(r"LOADERSPEC_EXTRAS=([\w,]+)", text):
            named = set(line.split(","))
            if named & (extras | own):  # a line that sets up the graded loaders
                assert named == extras, f"{page.name}: LOADERSPEC_EXTRAS={line}"
        venvs = set(re.findall(r"\.venv-(\w+)", text))
        assert venvs <= own, f"{page.name} names .venv-{sorted(venvs - own)}"
