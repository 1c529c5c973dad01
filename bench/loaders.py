"""Which loaders the benchmark compares, by name; a missing one is a reason, not a crash.

Owns the names shown in the report and each loader's importable `"module:Class"` (the peers
through `conformance.adapters`, each behind torch's constructor); importing one is
`faultinject.loaders.resolve`'s job (the one resolver). A loader whose package is not installed
(an optional extra) is reported as `n/a: <why>` and skipped.
"""

from __future__ import annotations

from loaderspec.faultinject import loaders

# Report name -> "module:attribute". Order is the report's column order.
LOADERS: dict[str, str] = {
    "torch": "torch.utils.data:DataLoader",
    "reference": "loaderspec.reference:DataLoader",
    "torchdata": "torchdata.stateful_dataloader:StatefulDataLoader",
    "nodes-thread": "loaderspec.conformance.adapters.torchdata_nodes:ThreadLoader",
    "nodes-process": "loaderspec.conformance.adapters.torchdata_nodes:ProcessLoader",
    "spdl": "loaderspec.conformance.adapters.spdl:Loader",
    "grain": "loaderspec.conformance.adapters.grain:Loader",
    "litdata": "loaderspec.conformance.adapters.litdata:Loader",
    "streaming": "loaderspec.conformance.adapters.streaming:Loader",
}


def unavailable_reason(name: str) -> str | None:
    """Why loader `name` cannot be imported here, or None when it can."""
    try:
        loaders.resolve(LOADERS[name], "bench")
    except Exception as exc:  # any import-time failure is a reason to show, not a crash
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None
