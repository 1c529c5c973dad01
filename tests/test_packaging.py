"""The wheel ships every package of the checkout: a folder missing from pyproject is a bug."""

from pathlib import Path

import tomllib

TOP = Path(__file__).resolve().parents[1]
ROOTS = ("bench", "conformance", "faultinject", "loaderspec", "reference")


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((TOP / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(TOP).parts)
        for root in ROOTS
        for init in (TOP / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert "loaderspec.spec" in listed
