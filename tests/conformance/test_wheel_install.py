"""The wheel: one top-level name (loaderspec) with the suite inside it, torch a range; installed
into a fresh virtualenv that already has torch, it keeps that torch, runs the quick selection
from the user's own directory, and leaves other projects' test runs alone.

The fresh virtualenv's "already installed" packages (torch and what the suite needs) are this
virtualenv's own, linked into a folder that a ``.pth`` file puts on the fresh interpreter's path,
as ``--system-site-packages`` would: pip sees them as installed and could only install another
torch *into* the fresh virtualenv, which the test would see (torch's version and folder). That
costs seconds where installing torch costs a minute; the nightly tier installs torch 2.14.1 for
real (both are local wheels here).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conformance_runner import ROOT
from other_projects import OWN_CONFORMANCE, OWN_LOADER_OPTION, write
from packaging.requirements import Requirement

TORCH_2_14 = "2.14.1"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the checkout's files (tracked, or new and not ignored): a
    checkout's stale build/ folder would otherwise slip old files into it."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip_wheel, "-w", str(out), str(src)], check=True, capture_output=True)
    [built] = out.glob("loaderspec-*.whl")
    return built


def test_the_wheel_installs_one_top_level_name_and_needs_a_torch_range(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "loaderspec",
        wheel.name.split("-py")[0] + ".dist-info",
    }
    for path in (
        "loaderspec/conformance/cases/test_exactly_once.py",
        "loaderspec/faultinject/driver.py",
        "loaderspec/reference/core.py",
        "loaderspec/spec/DataLoader.tla",
        "loaderspec/pytest_plugin.py",
    ):
        assert path in names
    assert not any(n.startswith(("loaderspec/docsite/", "bench/")) for n in names)
    assert "torch>=2.13" in _requires(wheel)
    # The drop-in loader needs none of the suite's tools: they are its extra.
    base = {Requirement(r).name for r in _requires(wheel)}
    assert base.isdisjoint({"pytest", "hypothesis", "psutil"})
    assert "Provides-Extra: suite" in _read(wheel, "METADATA")
    entry_points = _read(wheel, "entry_points.txt")
    assert "loaderspec = loaderspec.pytest_plugin" in entry_points


def _read(wheel: Path, name: str) -> str:
    """A file of the wheel's .dist-info folder."""
    archive = zipfile.ZipFile(wheel)
    [path] = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}")]
    return archive.read(path).decode()


def _requires(wheel: Path) -> list[str]:
    """The wheel's requirements outside its extras, as written (this Python's markers)."""
    found = []
    for line in _read(wheel, "METADATA").splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1])
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                found.append(str(req).split(";")[0].strip())
    return found


def _closure(names: list[str]) -> set[str]:
    """These distributions and everything they require (no extras), as installed here."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = Requirement(todo.pop()).name
        dist = importlib.metadata.distribution(name)
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _link_installed(names: set[str], into: Path) -> None:
    """Symlink the files of these installed distributions (top-level entries) into ``into``."""
    site = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for name in names:
        for file in importlib.metadata.distribution(name).files or []:
            top = file.parts[0]
            if top == ".." or (into / top).exists():
                continue
            (into / top).symlink_to(site / top)


def _fresh_venv(where: Path, base: Path | None) -> tuple[Path, Path]:
    """A new virtualenv (no pip: this one's pip installs into it); with ``base`` on its path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    if base is not None:
        (site / "users-packages.pth").write_text(f"{base}\n")
    return python, site


def _pip(python: Path, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _run(python: Path, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and k != "LOADERSPEC_LOADER"}
    return subprocess.run(
        [str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _torch(python: Path, cwd: Path) -> tuple[str, str]:
    done = _run(python, cwd, "-c", "import torch; print(torch.__version__); print(torch.__file__)")
    assert done.returncode == 0, done.stderr[-3000:]
    version, file = done.stdout.split()
    return version, file


MY_PROJECT_LOADER = (
    "from loaderspec.reference import DataLoader\n\n\n"
    "class MyLoader(DataLoader):\n"
    "    def __len__(self):  # the bug its expectation file lists\n"
    "        return super().__len__() + 1\n"
)
# The one bug, as each case that compares len() with torch's sees it.
EXPECT = "".join(
    f'[cases."{case}"]\noutcome = "FAIL"\nreason = "len() counts one batch too many (issue 7)"\n'
    for case in (
        "test_exactly_once::test_len_matches_the_batches_handed_out",
        "test_exactly_once::test_batches_are_torchs_for_drawn_configurations",
        "test_drop_in_batching::test_custom_batch_sampler_batches_are_handed_out_as_given",
    )
)
DOCS = ROOT / "docs" / "conformance.md"
GITHUB_BASH = ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")  # how Actions runs `run:`


def ci_steps(doc: Path = DOCS) -> list[str]:
    """The shell of each `run:` step between the worked CI job's `# --- steps` and `# --- end`
    markers, as written in the docs."""
    lines = doc.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() in ("# --- steps", "# --- end")]
    assert len(marks) == 2, "the CI job's step markers"
    lines = lines[marks[0] : marks[1]]
    steps = []
    for i, line in enumerate(lines):
        if line.strip() == "run: |":
            indent = len(line) - len(line.lstrip()) + 2
            body = []
            for more in lines[i + 1 :]:
                if more.strip() and len(more) - len(more.lstrip()) < indent:
                    break
                body.append(more[indent:])
            steps.append("\n".join(body))
    return steps


def _pip_shim(python: Path) -> None:
    """``.venv/bin/pip`` for a virtualenv made without pip: this interpreter's pip, installing
    into it (the documented job calls .venv/bin/pip)."""
    pip = python.parent / "pip"
    pip.write_text(f'#!/bin/sh\nexec {sys.executable} -m pip --python {python} "$@"\n')
    pip.chmod(0o755)


def _check_installed_suite(python: Path, site: Path, user: Path, wheel: Path) -> None:
    """The worked CI job of docs/conformance.md, its loaderspec steps verbatim, in a project
    with its own loader (one known bug in its expectation file), ``.venv`` the fresh virtualenv
    and the built wheel in ``ci/``: the wheel installs beside torch, the quick selection passes
    with the expected FAIL, and JUnit names cases by their stable ids. Then two other projects'
    tests, untouched."""
    user.mkdir()
    (user / "mypkg").mkdir()
    (user / "mypkg" / "__init__.py").write_text("")
    (user / "mypkg" / "loader.py").write_text(MY_PROJECT_LOADER)
    (user / "ci").mkdir()
    (user / "ci" / "expect.toml").write_text(EXPECT)
    shutil.copy(wheel, user / "ci")
    (user / ".venv").symlink_to(python.parent.parent)
    _pip_shim(python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOADERSPEC_LOADER")}
    env["PIP_NO_INDEX"] = "1"  # everything the steps install is here already
    steps = ci_steps()
    assert len(steps) == 2
    for step in steps:
        done = subprocess.run(
            [*GITHUB_BASH, step], cwd=user, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{step}\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    report = (user / "conformance-report" / "report.json").read_text()
    assert report.count('"outcome": "PASS"') >= 25
    assert report.count('"expectation": "expected"') == 4  # both drop_last values, two more
    junit = (user / "conformance-report" / "junit.xml").read_text()
    assert (
        'classname="loaderspec.conformance.test_exactly_once" name="test_len_matches_the' in junit
    )
    assert "site-packages" not in junit.split("<properties>")[0]
    where = _run(python, user, "-c", "import loaderspec.suite as s; print(s.location())")
    assert Path(where.stdout.strip()).is_relative_to(site)
    # The drop-in loader, plainly imported, beside a module of the user's own named reference
    # (and conformance): theirs stays theirs, and sys.path is untouched.
    (user / "reference.py").write_text("MINE = True\n")
    (user / "conformance.py").write_text("MINE = True\n")
    plain = (
        "import sys; before = list(sys.path)\n"
        "from loaderspec.reference import DataLoader\n"
        "import reference, conformance\n"
        "assert reference.MINE and conformance.MINE and sys.path == before\n"
        "print(sorted(x for x in ('pytest', 'hypothesis') if x in sys.modules))\n"
        "print(list(DataLoader(list(range(4)), batch_size=2, num_workers=2)))\n"
    )
    done = _run(python, user, "-c", plain)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[]", "[tensor([0, 1]), tensor([2, 3])]"]

    for name, files, args in (
        ("own_conformance", OWN_CONFORMANCE, ()),
        ("own_loader_option", OWN_LOADER_OPTION, ("--loader=parquet",)),
    ):
        project = user.parent / name
        write(project, files)
        done = _run(python, project, "-m", "pytest", "-p", "no:cacheprovider", *args)
        assert done.returncode == 0, f"{name}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        assert "loaderspec conformance" not in done.stdout


@pytest.mark.slow
def test_the_wheel_keeps_the_users_torch_2_13_and_runs_there(wheel: Path, tmp_path: Path) -> None:
    base = tmp_path / "installed"
    _link_installed(
        _closure([*_requires(wheel), "pytest-xdist", "psutil", "hypothesis"]), base
    )  # the job's [xdist]
    python, site = _fresh_venv(tmp_path / "venv", base)
    before = _torch(python, tmp_path)
    assert before[0].startswith("2.13.0")
    # --no-index: nothing to fetch; the wheel's requirements are met by what is installed.
    out = _pip(python, "--no-index", str(wheel))
    assert f"Requirement already satisfied: torch>=2.13 in {base}" in out
    assert out.strip().splitlines()[-1] == f"Successfully installed {wheel.name.split('-py')[0]}"
    assert _torch(python, tmp_path) == before
    assert not (site / "torch").exists()
    _check_installed_suite(python, site, tmp_path / "user", wheel)


@pytest.mark.nightly
def test_the_wheel_keeps_the_users_torch_2_14_and_runs_there(wheel: Path, tmp_path: Path) -> None:
    """torch 2.14.1 (a local wheel, with its CUDA libraries) installed for real, first."""
    python, site = _fresh_venv(tmp_path / "venv", None)
    others = [r for r in _requires(wheel) if Requirement(r).name != "torch"]
    others += ["pytest", "pytest-xdist", "psutil", "hypothesis"]  # the job's [suite,xdist]
    _pip(python, "-q", f"torch=={TORCH_2_14}", *others, timeout=1800)
    before = _torch(python, tmp_path)
    assert before[0].split("+")[0] == TORCH_2_14
    out = _pip(python, "--no-index", str(wheel))
    assert f"Requirement already satisfied: torch>=2.13 in {site}" in out
    assert _torch(python, tmp_path) == before
    _check_installed_suite(python, site, tmp_path / "user", wheel)
