"""Hypothesis-drawn scenarios against a loader, in bounded time.

`check_drawn(strategy, body, examples=N)` runs `body(example)` for N drawn examples
(derandomized: the same examples every run; no example database written), and returns the last
example that was played. Bounded whatever the loader does:

* each example is played without a leak wait (`play(..., leaks=False)`): a loader that leaks at
  every shutdown does not pay the wait once per example; the case then checks leaks once, on one
  replay of the returned example;
* an example the loader refuses is rejected, not a SKIP of the whole case; a case whose first
  `REFUSALS_BEFORE_SKIP` examples were all refused (a loader that refuses the kind of data the
  case is about) is a SKIP at once;
* a failing example is shrunk for at most `shrink_s` seconds in all (Hypothesis's own bound is 5
  minutes), or not at all (`shrink_s=0`: the first failure is the one reported).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import hypothesis
import pytest
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import errors as hypothesis_errors
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from loaderspec.faultinject.driver import Run

__all__ = ["MORE_EXAMPLES", "QUICK_EXAMPLES", "SHRINK_S", "check_drawn", "played"]

T = TypeVar("T")

QUICK_EXAMPLES = 2  # drawn examples of a case in the quick selection (besides its picks)
MORE_EXAMPLES = 10  # drawn examples of its whole-suite sibling
SHRINK_S = 45.0  # how long a failing example may be shrunk, in all
REFUSALS_BEFORE_SKIP = 3
MSG_ALL_REFUSED = "the loader refused every drawn configuration"


@contextlib.contextmanager
def _shrink_budget(seconds: float) -> Iterator[None]:
    # Hypothesis keeps this bound a module variable so that users can change it.
    before = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = int(max(seconds, 1))
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = before


def played(r: Run) -> Run:
    """`r`, or reject the example when the loader refused its configuration."""
    if r.refused:
        reject()
    return r


def check_drawn(
    strategy: st.SearchStrategy[T],
    body: Callable[[T], Any],
    *,
    examples: int,
    picks: tuple[T, ...] = (),
    shrink_s: float = SHRINK_S,
) -> T:
    """Run `body` on `picks` (hand-picked examples, first) and on `examples` drawn ones (see the
    module docstring); the last one played.

    Raises:
        pytest.skip.Exception: the loader refused every example.
    """
    last: list[T] = []
    refused = [0]
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if shrink_s > 0:
        phases.append(Phase.shrink)

    @settings(
        max_examples=max(examples, 1),
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run_examples(example: T) -> None:
        try:
            body(example)
        except hypothesis_errors.UnsatisfiedAssumption:
            refused[0] += 1
            if not last and refused[0] >= REFUSALS_BEFORE_SKIP:
                pytest.skip(MSG_ALL_REFUSED)
            raise
        last[:] = [example]

    for pick in reversed(picks):
        run_examples = hypothesis.example(pick)(run_examples)

    try:
        with _shrink_budget(shrink_s):
            run_examples()
    except hypothesis_errors.Unsatisfiable:
        pytest.skip(MSG_ALL_REFUSED)
    if not last:
        pytest.skip(MSG_ALL_REFUSED)
    return last[0]
