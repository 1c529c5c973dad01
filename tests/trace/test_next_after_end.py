"""A next() after the end and a next() after a failure are behaviours of the spec (issue 10).

The reference iterator is asked for more after StopIteration (twice) and after a worker's death
(three times); each such call is a ``MainCallNext`` record (then ``MainStopIteration`` again, or,
on a failed iterator, nothing: the call raises at once), and trace-check accepts both runs.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from loaderspec.faultinject.datasets import FaultyDataset
from loaderspec.faultinject.faults import Die
from loaderspec.reference import DataLoader

from loaderspec import tracecheck, tracewriter


def _calls(it: object, n: int) -> list[str]:
    """What n more next() calls gave: "batch", "stop" or "error"."""
    out = []
    for _ in range(n):
        try:
            # The iterator is a reference loader's, typed loosely by torch's __iter__.
            next(it)  # type: ignore[call-overload]
            out.append("batch")
        except StopIteration:
            out.append("stop")
        except RuntimeError:
            out.append("error")
    return out


def _actions(trace_dir: Path) -> list[str]:
    (run,) = tracecheck.runs_of([trace_dir])
    return [r.action for r in run.records]


@pytest.mark.slow
def test_next_after_the_end_and_after_a_failure_are_accepted(tmp_path: Path, no_child_left):
    ended, failed = tmp_path / "ended", tmp_path / "failed"
    with tracewriter.trace_to(ended):
        it = iter(DataLoader(list(range(4)), batch_size=1, num_workers=2, prefetch_factor=2))
        assert _calls(it, 7) == ["batch"] * 4 + ["stop"] * 3
        del it
        gc.collect()
    with tracewriter.trace_to(failed):
        data = FaultyDataset(8, (Die(at=3, once=True),))
        it = iter(DataLoader(data, batch_size=1, num_workers=2, prefetch_factor=2))
        got = _calls(it, 8)
        del it
        gc.collect()
    first = got.index("error")  # when the death is noticed is a race; after it, only errors
    assert set(got[first:]) == {"error"}, got
    assert _actions(ended).count("MainStopIteration") == 3
    assert _actions(failed).count("MainCallNext") == 8
    verdicts = tracecheck.check_runs(tracecheck.runs_of([ended, failed]))
    for verdict in verdicts:
        assert verdict.ok, tracecheck.localise(verdict).explain()
