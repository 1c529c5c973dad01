"""Which loaders the benchmark compares, by name; a missing one is a reason, not a crash.

Takes the names shown in the report and each loader's importable `"module:Class"` (the peers
through `conformance.adapters`, each behind torch's constructor) from `loaderspec.graded`;
importing one is `faultinject.loaders.resolve`'s job (the one resolver). A loader whose package
is not installed (an optional extra) is reported as `n/a: <why>` and skipped.
"""

from __future__ import annotations

from loaderspec.faultinject import loaders

from loaderspec import graded

# Report name -> "module:attribute", from the one list of graded loaders (`loaderspec.graded`).
# Order is the report's column order: torch first, the column the others are read against.
LOADERS: dict[str, str] = {
    g.name: g.benched
    for g in sorted(graded.LOADERS, key=lambda g: g.name != "torch")
    if g.benched is not None
}


def unavailable_reason(name: str) -> str | None:
    """Why loader `name` cannot be imported here, or None when it can."""
    try:
        loaders.resolve(LOADERS[name], "bench")
    except Exception as exc:  # any import-time failure is a reason to show, not a crash
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None
