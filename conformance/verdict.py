"""Whether a conformance run passes: the exit policy (``--conformance-fail-on``) over the graded
cases, after the expectation file (``conformance.expect``) had its say.

- ``must`` (the default): a FAIL fails the run, unless the expectation file expects it;
- ``should``: a NON-STRICT does too, unless expected (or it is better than an expected FAIL);
- ``never``: no grade fails the run.

Whatever the policy, a run that graded nothing (every case it ran was SKIP: a loader that
refuses every configuration, a constructor the suite cannot call) fails: it checked nothing.
A pure function of the cases as ``report.json`` records them; the plugin turns a failed verdict
into pytest's exit status 1 and ``loaderspec report`` into its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderspec.conformance.expect import EXPECTED, FIXED
from loaderspec.conformance.harness.grading import FAIL, NON_STRICT, SKIP

from loaderspec.vocabulary import FAIL_ON

__all__ = ["DEFAULT_POLICY", "Verdict", "verdict"]

DEFAULT_POLICY = FAIL_ON[0]
MSG_NOTHING_GRADED = (
    "the run graded nothing: all {n} cases were SKIP (first reason: {reason}); a loader that "
    "cannot be called with torch's DataLoader arguments needs an adapter (docs/conformance.md)"
)


@dataclass(frozen=True)
class Verdict:
    policy: str
    failed: bool
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "failed": self.failed, "reasons": self.reasons}


def _counted(case: dict[str, Any], outcome: str) -> bool:
    return case["outcome"] == outcome and case.get("expectation") not in (EXPECTED, FIXED)


def verdict(cases: list[dict[str, Any]], policy: str = DEFAULT_POLICY) -> Verdict:
    """The verdict on ``cases`` (report.json's) under ``policy`` (must, should or never)."""
    if cases and all(c["outcome"] == SKIP for c in cases):
        reason = MSG_NOTHING_GRADED.format(n=len(cases), reason=cases[0].get("detail", ""))
        return Verdict(policy, True, [reason])
    failing = [FAIL] if policy == "must" else [FAIL, NON_STRICT] if policy == "should" else []
    reasons = []
    for outcome in failing:
        found = [c["id"] for c in cases if _counted(c, outcome)]
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            reasons.append(f"{len(found)} unexpected {outcome} ({shown})")
    return Verdict(policy, bool(reasons), reasons)
