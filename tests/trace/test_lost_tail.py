"""A log that lost its tail is INCOMPLETE (README, docs/tracecheck.md), not NOT-A-BEHAVIOUR: the
main process's file cut short (its last lines, or mid-line) while its workers' files are whole
leaves worker records after the main process's last one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from loaderspec.reference import DataLoader

from loaderspec import tracecheck, tracewriter


@pytest.mark.slow
def test_a_main_log_cut_short_is_incomplete(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    with tracewriter.trace_to(whole):
        assert len(list(DataLoader(list(range(8)), batch_size=2, num_workers=2))) == 4
    files = sorted(whole.glob("*.jsonl"), key=lambda p: -p.stat().st_size)  # the main's first
    main = files[0].read_text()
    cut = {}
    for name, text in (("lines", "".join(main.splitlines(True)[:-3])), ("bytes", main[:-700])):
        cut[name] = tmp_path / name
        shutil.copytree(whole, cut[name])
        (cut[name] / files[0].name).write_text(text)
    verdicts = tracecheck.check_runs(tracecheck.runs_of([whole, *cut.values()]), localise=False)
    assert [v.status for v in verdicts] == [tracecheck.ACCEPTED] + [tracecheck.INCOMPLETE] * 2
    assert "lost its tail" in verdicts[1].detail
