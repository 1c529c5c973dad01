"""Hypothesis-drawn scenarios against a loader, in bounded time.

`check_drawn(strategy, play, examples=N)` runs `play(example)` for N drawn examples
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

Every failure carries its evidence: the message is the failing check's own (expected, actual,
the loader's error) with the drawn example added when the check did not name it. A failure that
Hypothesis calls flaky (its own replay of the example passed: a race, a loaded machine) is not
reported as Hypothesis's exception wrapper: the example is replayed `REPLAYS` more times, and
the case fails with the first observation and whether a replay reproduced it. The draws are
derandomized, so the case's rerun command draws the same examples again, in the same order. A
failure carries the example it failed on (`draws.DRAW_ATTR`): the plugin records it, and its
replay (`--conformance-replay-draw`, `draws.replaying`) plays that one example alone. A failure
that is a hang the loader already showed at iter() in earlier cases (`scenario.HUNG_PATTERN`)
ends the draws at once: shrinking or replaying it would wait out the same hang again.
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
from loaderspec.conformance.harness import draws, scenario
from loaderspec.conformance.harness.grading import Violation
from loaderspec.faultinject.driver import Run

__all__ = [
    "MORE_EXAMPLES",
    "QUICK_EXAMPLES",
    "REPLAYS",
    "SHRINK_S",
    "check_drawn",
    "played",
]

T = TypeVar("T")

QUICK_EXAMPLES = 2  # drawn examples of a case in the quick selection (besides its picks)
MORE_EXAMPLES = 10  # drawn examples of its whole-suite sibling
SHRINK_S = 45.0  # how long a failing example may be shrunk, in all
REFUSALS_BEFORE_SKIP = 3
REPLAYS = 3  # replays of an example whose failure Hypothesis could not reproduce
MSG_ALL_REFUSED = "the loader refused every drawn configuration"
MSG_REPRODUCED = "reproduced on replay {k} of {n}"
MSG_NOT_REPRODUCED = "not reproduced on replay ({n} replays passed): first observation shown"
MSG_REPLAYED = "the recorded draw replayed alone"
MSG_REPLAY_REFUSED = "the loader refused the recorded draw"


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
    play: Callable[[T], Any],
    *,
    examples: int,
    picks: tuple[T, ...] = (),
    shrink_s: float = SHRINK_S,
) -> T:
    """Run `play` on `picks` (hand-picked examples, first) and on `examples` drawn ones (see the
    module docstring); the last one played.

    Raises:
        pytest.skip.Exception: the loader refused every example.
    """
    recorded = draws.replaying()
    if recorded is not None:
        return _replay_alone(play, recorded.example)
    last: list[T] = []
    refused = [0]
    failures: list[tuple[T, BaseException]] = []  # the first failing example, as observed
    latest: list[T] = []  # the last failing example (the one Hypothesis reports)
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if shrink_s > 0:
        phases.append(Phase.shrink)

    def body(example: T) -> None:
        """`play`, its failures recorded (the first as observed, the last as reported)."""
        try:
            play(example)
        except hypothesis_errors.UnsatisfiedAssumption:
            raise
        except (Exception, pytest.fail.Exception) as exc:
            if not failures:
                failures.append((example, exc))
            latest[:] = [example]
            if scenario.HUNG_PATTERN in _message(exc):
                raise _Settled(exc) from None  # no shrinking or replays of a known hang
            raise

    # The draws are derandomized from this function's source (Hypothesis hashes it, decorators
    # included): an edit of these lines draws other examples in every drawn case, and the
    # broken loaders the suite is shown to catch were shown with these draws. Keep it as is.
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
    except _Settled as settled:
        raise _with_draw(settled.failure, latest[0], "") from None
    except hypothesis_errors.Flaky as flaky:
        if not failures:
            raise
        example, first = failures[0]
        raise _replayed(play, example, first) from flaky
    except (Exception, pytest.fail.Exception) as exc:
        raise _with_draw(exc, latest[0] if latest else None, "") from None
    if not last:
        pytest.skip(MSG_ALL_REFUSED)
    return last[0]


class _Settled(BaseException):
    """A failure that ends the draws at once (Hypothesis lets a BaseException through): the
    loader already hung at iter() in earlier cases (`scenario.HUNG_PATTERN`), so shrinking it
    or replaying it would only wait out the same hang again."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


def _replay_alone(body: Callable[[T], Any], example: T) -> T:
    """Play the recorded `example` once, as the case's only example (`draws`)."""
    try:
        body(example)
    except hypothesis_errors.UnsatisfiedAssumption:
        pytest.skip(MSG_REPLAY_REFUSED)
    except (Exception, pytest.fail.Exception) as exc:
        raise _with_draw(exc, example, MSG_REPLAYED) from None
    return example


def _replayed(body: Callable[[T], Any], example: T, first: BaseException) -> BaseException:
    """The failure to report for `example`, whose failure `first` Hypothesis could not
    reproduce: a replay's failure if one of `REPLAYS` fails, else the first observation, each
    saying which."""
    for k in range(1, REPLAYS + 1):
        try:
            body(example)
        except hypothesis_errors.UnsatisfiedAssumption:
            continue
        except (Exception, pytest.fail.Exception) as exc:
            return _with_draw(exc, example, MSG_REPRODUCED.format(k=k, n=REPLAYS))
    return _with_draw(first, example, MSG_NOT_REPRODUCED.format(n=REPLAYS))


def _with_draw(exc: BaseException, example: object, note: str) -> BaseException:
    """`exc` as a failure of the case (its property kept), its message with the drawn example
    (unless the check named it) and `note`."""
    message = _message(exc)
    # A check that named the example already (a configuration's line): not twice. A short
    # one (a number) is found in any message, so it is always added.
    named = len(repr(example)) >= 10 and (repr(example) in message or str(example) in message)
    if example is not None and not named:
        message += f"; drawn: {example!r}"
    if note:
        message += f" [{note}]"
    prop = getattr(exc, "property", None)
    out: BaseException
    if isinstance(exc, Violation) and prop:
        out = Violation(prop, message)
    elif isinstance(exc, pytest.fail.Exception):
        out = pytest.fail.Exception(message, pytrace=False)
    else:
        out = pytest.fail.Exception(f"{type(exc).__name__}: {message}", pytrace=False)
    if example is not None:
        setattr(out, draws.DRAW_ATTR, example)
    return out


def _message(exc: BaseException) -> str:
    if isinstance(exc, pytest.fail.Exception):
        return str(exc.msg)
    return str(exc) or type(exc).__name__
