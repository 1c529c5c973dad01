"""Two other projects' test suites, for the checks that loaderspec's plugin leaves them alone:
one with its own ``conformance`` package, one whose conftest defines its own ``--loader``."""

from __future__ import annotations

from pathlib import Path

OWN_CONFORMANCE = {
    "conformance/__init__.py": "WHOSE = 'mine'\n",
    "conformance/plugin.py": "",
    "conformance/test_own.py": (
        "import conformance\n\n\ndef test_own():\n    assert conformance.WHOSE == 'mine'\n"
    ),
}
OWN_LOADER_OPTION = {
    "conftest.py": (
        "import pytest\n\n\n"
        "def pytest_addoption(parser):\n"
        "    parser.addoption('--loader', default='csv', help='our own data loader')\n\n\n"
        "@pytest.fixture\n"
        "def loader(request):\n"
        "    return request.config.getoption('--loader')\n"
    ),
    "test_own.py": "def test_own(loader):\n    assert loader == 'parquet'\n",
}


def write(root: Path, files: dict[str, str]) -> None:
    """Write a project's files under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
