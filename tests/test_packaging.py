"""The wheel's package list: every package folder of the checkout that the wheel ships is listed
in pyproject (the suite's as loaderspec.conformance, ...); the checkout's tools stay out.
(Building and installing the wheel: tests/conformance/test_wheel_install.py.)"""

from pathlib import Path

import tomllib

TOP = Path(__file__).resolve().parents[1]
SUITE_ROOTS = ("conformance", "faultinject", "reference")
CHECKOUT_ONLY = ("bench", "loaderspec.docsite")


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((TOP / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(TOP).parts)
        for root in (*SUITE_ROOTS, "loaderspec")
        for init in (TOP / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    wheel_names = {
        f"loaderspec.{name}" if name.split(".")[0] in SUITE_ROOTS else name
        for name in found
        if not name.startswith(CHECKOUT_ONLY)
    }
    assert wheel_names - listed == set(), "add these to [tool.setuptools] packages"
    assert "loaderspec.spec" in listed


def test_the_license_file_matches_the_metadata_and_the_changelog_knows_the_version() -> None:
    config = tomllib.loads((TOP / "pyproject.toml").read_text())
    assert config["project"]["license"] == {"text": "BSD-3-Clause"}
    assert (TOP / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert f"## {config['project']['version']} " in (TOP / "CHANGELOG.md").read_text()


def test_the_suite_is_imported_by_its_loaderspec_names_only() -> None:
    """Since 0.3 the suite's packages are loaderspec.reference, .conformance, .faultinject; an
    import by the old top-level name would load a second copy in a checkout (whose top folder
    is on the path) and fail in a wheel."""
    import re

    old = re.compile(r"^\s*(?:from|import) (?:" + "|".join(SUITE_ROOTS) + r")\b", re.M)
    found = [
        str(path.relative_to(TOP))
        for root in ("bench", "conformance", "faultinject", "loaderspec", "reference", "tests")
        for path in (TOP / root).rglob("*.py")
        if old.search(path.read_text())
    ]
    assert found == []
