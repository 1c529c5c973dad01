"""Expectation files (``--conformance-expect=FILE``): a loader's known non-PASS outcomes.

A loader author keeps one in their own repository, the way array-api-tests' implementers keep an
xfails file, so that CI fails on new failures only. TOML or JSON (by the file's suffix), one entry
per case id (``conformance.ids``) under ``cases``, each with the expected outcome and why::

    [cases."test_shutdown_completes::test_stuck_worker_is_terminated_at_shutdown"]
    outcome = "NON-STRICT"
    reason = "shutdown waits 5 s for a stuck worker (mypkg#12)"

    [cases."test_no_silent_loss::test_epoch_does_not_end_quietly_after_worker_death"]
    outcome = "FAIL"
    reason = "mypkg#15"

An entry without ``[params]`` covers every parametrized case of that function (an entry of the
case itself wins). A graded outcome is compared with its entry by badness, PASS < NON-STRICT <
FAIL: worse than expected is a regression, better is "fixed" (reported, so that the entry can
go), the same is expected. A SKIP entry only documents: a SKIP is then expected, and a graded
outcome is judged as if there were no entry; a SKIP where a grade was expected says nothing.

Every problem with the file is a ``ExpectationError`` (the plugin raises it as a usage error):
unreadable, not UTF-8, not TOML/JSON, an entry naming no case (with the nearest ids), an unknown
outcome, a missing reason, a key besides outcome and reason. An entry naming a renamed case's
old id works, with a warning naming the new id.
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loaderspec.conformance import ids
from loaderspec.conformance.harness.grading import FAIL, NON_STRICT, PASS, SKIP

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "EXPECTED",
    "FIXED",
    "REGRESSION",
    "Expectation",
    "ExpectationError",
    "Expectations",
    "Status",
    "load",
]

Status = Literal["expected", "fixed", "regression"]
EXPECTED: Status = "expected"
FIXED: Status = "fixed"
REGRESSION: Status = "regression"
ALLOWED = (FAIL, NON_STRICT, SKIP)
ENTRY_KEYS = frozenset({"outcome", "reason"})
_BADNESS = {PASS: 0, NON_STRICT: 1, FAIL: 2}

MSG_READ = "{file}: cannot read the expectation file: {error}"
MSG_PARSE = "{file}: not valid {kind}: {error}"
MSG_SHAPE = (
    '{file}: expected a table "cases" mapping case ids to {{outcome, reason}}, '
    'e.g. [cases."test_x::test_y"] outcome = "FAIL" reason = "..."'
)
MSG_NO_CASE = (
    "{file}: entry {entry!r} names no case of the suite{near}; case ids are "
    "'test_<file>::test_<case>[param=value]' as in report.json's \"id\""
)
MSG_OUTCOME = "{file}: entry {entry!r}: outcome {outcome!r} is not one of {allowed}"
MSG_ENCODING = "{file}: not UTF-8 text (byte {at}); save the expectation file as UTF-8"
MSG_KEYS = (
    "{file}: entry {entry!r}: unknown key(s) {keys}; an entry has only outcome and reason "
    "(a typo there would be ignored)"
)
MSG_REASON = "{file}: entry {entry!r}: give a reason (a non-empty string: why, an issue link)"


class ExpectationError(ValueError):
    """The expectation file cannot be used; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class Expectation:
    entry: str  # the id as the file wrote it (current, or an alias: then `id` is the new one)
    id: str
    outcome: str
    reason: str


@dataclass(frozen=True)
class Expectations:
    file: str
    entries: tuple[Expectation, ...]
    warnings: tuple[str, ...]  # entries naming a renamed case by its old id

    def of(self, cid: str) -> Expectation | None:
        """The entry covering case ``cid`` (its own entry before its function's)."""
        own = [e for e in self.entries if e.id == cid]
        return next(iter(own or [e for e in self.entries if ids.covers(e.id, cid)]), None)

    def status(self, cid: str, outcome: str) -> Status | None:
        """How ``outcome`` of case ``cid`` compares with its entry (None: no entry)."""
        entry = self.of(cid)
        if entry is None:
            return None
        if outcome == entry.outcome:
            return EXPECTED
        if SKIP in (outcome, entry.outcome):
            return None
        return REGRESSION if _BADNESS[outcome] > _BADNESS[entry.outcome] else FIXED


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExpectationError(MSG_READ.format(file=path, error=exc)) from None
    except UnicodeDecodeError as exc:
        raise ExpectationError(MSG_ENCODING.format(file=path, at=exc.start)) from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExpectationError(MSG_PARSE.format(file=path, kind="JSON", error=exc)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(MSG_PARSE.format(file=path, kind="TOML", error=exc)) from None


def _entry(path: Path, name: str, body: Any) -> tuple[Expectation, str | None]:
    cid = ids.canonical(name)
    if cid is None:
        known = list(ids.suite())
        near = [cid for cid in known if cid.startswith(name)][:2] or difflib.get_close_matches(
            name, known, n=2, cutoff=0.6
        )
        hint = f" (nearest: {', '.join(repr(x) for x in near)})" if near else ""
        raise ExpectationError(MSG_NO_CASE.format(file=path, entry=name, near=hint))
    extra = sorted(set(body) - ENTRY_KEYS) if isinstance(body, dict) else []
    if extra:
        keys = ", ".join(map(repr, extra))
        raise ExpectationError(MSG_KEYS.format(file=path, entry=name, keys=keys))
    outcome = body.get("outcome") if isinstance(body, dict) else None
    if outcome not in ALLOWED:
        allowed = ", ".join(ALLOWED)
        raise ExpectationError(
            MSG_OUTCOME.format(file=path, entry=name, outcome=outcome, allowed=allowed)
        )
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ExpectationError(MSG_REASON.format(file=path, entry=name))
    warning = None
    if cid != name:
        warning = f"{path}: entry {name!r} is an old id of {cid!r}; rename the entry"
    return Expectation(name, cid, outcome, reason.strip()), warning


def load(file: str | Path) -> Expectations:
    """Read and check an expectation file against the whole suite's case ids.

    Raises:
        ExpectationError: the file cannot be used (nothing is loaded).
    """
    path = Path(file)
    data = _parse(path)
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, dict):
        raise ExpectationError(MSG_SHAPE.format(file=path))
    entries, warnings = [], []
    for name, body in cases.items():
        entry, warning = _entry(path, name, body)
        entries.append(entry)
        if warning:
            warnings.append(warning)
    return Expectations(str(path), tuple(entries), tuple(warnings))
