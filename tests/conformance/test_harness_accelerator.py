"""conformance.harness.accelerator: a pinning case has fakeaccel built, in a child of the pytest
process, before its sandbox loads it (a cold build does not fit a case's 20 s: killed there, it
left each later case the same build, and every pinning case hung in a clean CI); once per
process; a failed build SKIPs the case with its reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loaderspec.conformance.harness import accelerator

from loaderspec import fakeaccel


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str | None]]:
    """fakeaccel available and not built; each build answers the next of the list's values."""
    answers: list[str | None] = []
    calls: list[str | None] = []

    def build_elsewhere() -> str | None:
        calls.append(answers.pop(0))
        return calls[-1]

    monkeypatch.setattr(fakeaccel, "available", lambda: True)
    monkeypatch.setattr(fakeaccel, "build_elsewhere", build_elsewhere)
    accelerator._built.cache_clear()
    yield answers
    accelerator._built.cache_clear()
    assert answers == [], "a build the test expected did not happen"


def test_the_first_pinning_case_builds_and_the_next_ones_do_not(builds: list) -> None:
    builds.append(None)
    accelerator.require()
    accelerator.require()


def test_a_failed_build_skips_each_pinning_case_with_its_reason(builds: list) -> None:
    builds.append("fakeaccel: the build failed (exit 1): boom")
    for _ in range(2):
        with pytest.raises(pytest.skip.Exception, match=r"build failed \(exit 1\): boom"):
            accelerator.require()
