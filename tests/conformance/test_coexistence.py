"""Other projects' test runs, where loaderspec is installed, are not affected by its plugin: a
project with its own ``conformance`` package, one whose conftest defines its own ``--loader``.
(tests/test_packaging.py runs the same projects against the installed wheel.)"""

from __future__ import annotations

import pytest
from other_projects import OWN_CONFORMANCE, OWN_LOADER_OPTION, write

pytest_plugins = ["pytester"]


def test_a_project_with_its_own_conformance_package_runs_its_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    write(pytester.path, OWN_CONFORMANCE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "loaderspec conformance" not in result.stdout.str()


def test_a_project_with_its_own_loader_option_keeps_it(pytester: pytest.Pytester) -> None:
    write(pytester.path, OWN_LOADER_OPTION)
    result = pytester.runpytest_subprocess("--loader=parquet", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "loaderspec conformance" not in result.stdout.str()
    # loaderspec's own options are all there; --loader in its group is not.
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    assert "--conformance-loader=PKG.MOD:CLASS" in help_text
    assert "our own data loader" in help_text
