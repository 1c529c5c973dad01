"""Other projects' test runs, where loaderspec is installed, are not affected by its plugin: a
project with its own ``conformance`` package, one whose conftest defines its own ``--loader``.
(tests/test_packaging.py runs the same projects against the installed wheel.)"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

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


def _write(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_project_with_its_own_conformance_package_runs_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    _write(pytester, OWN_CONFORMANCE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "loaderspec conformance" not in result.stdout.str()


def test_a_project_with_its_own_loader_option_keeps_it(pytester: pytest.Pytester) -> None:
    _write(pytester, OWN_LOADER_OPTION)
    result = pytester.runpytest_subprocess("--loader=parquet", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "loaderspec conformance" not in result.stdout.str()
    # loaderspec's own options are all there; --loader in its group is not.
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    assert "--conformance-loader=PKG.MOD:CLASS" in help_text
    assert "our own data loader" in help_text
