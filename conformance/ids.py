"""Case ids: the stable name of each conformance case, and the old names it still answers to.

A case id is ``<case file>::<function>[<param>=<value>,...]``, e.g.
``test_exactly_once::test_len_matches_the_batches_handed_out[drop_last=False]``: the case file's
module name without its folder (a case file moved between folders keeps its ids), the function,
and its parameters by name, sorted (reordering a parametrize list or its argument names renumbers
nothing). It does not depend on where pytest ran from (a checkout, ``--pyargs``, any directory),
unlike pytest's node id. ``report.json``, the matrix, JUnit properties and expectation files all
use it.

A case renamed keeps its old id as an alias for one release (``RENAMED``); the node ids of
loaderspec 0.1 (``conformance/test_X.py::name[2-1]`` before the cases moved into
``conformance/cases/``, and ``conformance/cases/test_X.py::name[2-1]`` after) are aliases until
0.3. Expectation files naming an alias still work, with a warning naming the new id.

The suite's ids are enumerated from the case functions' ``parametrize`` marks without running
pytest's collection (``suite``), so an expectation file can be checked against the whole suite
whatever part of it a run selects; a test checks that this enumeration equals what pytest
collects.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from loaderspec.conformance import catalog

__all__ = [
    "CASES_DIR",
    "RENAMED",
    "Case",
    "aliases",
    "canonical",
    "case_id",
    "covers",
    "of_item",
    "suite",
]

CASES_DIR = "conformance/cases"

# Old case id -> new case id, for cases renamed in this release; an entry is removed one release
# after the rename. The property FailStopAfterWorkerDeath became FailStopAfterFatalError (issue
# 9), and its case file with it: its case ids, and the 0.1 node ids of that file (which the
# enumeration below derives from the current file name only).
_OLD_FAIL_STOP, _FAIL_STOP = "test_fail_stop_after_worker_death", "test_fail_stop_after_fatal_error"
RENAMED: dict[str, str] = {
    f"{where}{old}{suffix}::{function}": f"{new}::{function}"
    for old, new, function in (
        (_OLD_FAIL_STOP, _FAIL_STOP, "test_next_after_worker_death_raises_promptly"),
        (_OLD_FAIL_STOP, _FAIL_STOP, "test_next_after_idle_worker_death_does_not_hang"),
        # A batch after a timeout breaks only the SHOULD (the spec's TorchTimeoutResumes).
        (
            "test_no_delivery_after_shutdown",
            _FAIL_STOP,
            "test_nothing_is_handed_out_after_a_timeout",
        ),
        # A fetch after the done event breaks NoFetchAfterDone (a SHOULD), not ShutdownCompletes.
        (
            "test_shutdown_completes",
            "test_no_fetch_after_done",
            "test_workers_fetch_nothing_once_shutdown_began",
        ),
    )
    for where, suffix in (("", ""), ("conformance/", ".py"), (f"{CASES_DIR}/", ".py"))
}


def _value(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        return str(value)
    name = getattr(value, "__name__", None)
    if isinstance(name, str):
        return name
    text = repr(value)
    return type(value).__name__ if " at 0x" in text else text


def case_id(module: str, function: str, params: Mapping[str, Any] | None = None) -> str:
    """The id of case ``function`` in case file ``module`` (dotted or not) with ``params``."""
    base = f"{module.rsplit('.', 1)[-1]}::{function}"
    if not params:
        return base
    return base + "[" + ",".join(f"{k}={_value(params[k])}" for k in sorted(params)) + "]"


def of_item(item: pytest.Item) -> str:
    """The case id of a collected pytest item."""
    callspec = getattr(item, "callspec", None)
    params = dict(callspec.params) if callspec is not None else {}
    function = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    module = getattr(getattr(item, "module", None), "__name__", item.nodeid.split("::")[0])
    return case_id(module.removesuffix(".py").replace("/", "."), function, params)


@dataclass(frozen=True)
class Case:
    """One case of the suite: its id, where it lives, what it checks."""

    id: str
    file: str  # relative to the suite's top: conformance/cases/test_X.py
    function: str
    params: tuple[tuple[str, Any], ...]
    properties: tuple[str, ...]
    guards: str  # the docstring's Guards: line (public issues it guards against)
    legacy_ids: tuple[str, ...]  # loaderspec 0.1's node ids of this case


def _parametrizations(fn: Callable[..., Any]) -> list[tuple[dict[str, Any], str | None]]:
    """Each (params, pytest's 0.1-era id or None) the function's parametrize marks expand to."""
    combos: list[tuple[dict[str, Any], list[str] | None]] = [({}, [])]
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = mark.args[1] if len(mark.args) > 1 else mark.kwargs["argvalues"]
        ids = mark.kwargs.get("ids")
        rows: list[tuple[tuple[Any, ...], str | None]] = []
        for i, value in enumerate(values):
            is_param = hasattr(value, "marks")  # pytest.param(...): values, marks, id
            given = value.id if is_param else None
            value = value.values if is_param else value
            row = tuple(value) if len(names) > 1 or is_param else (value,)
            legacy = given or (ids[i] if isinstance(ids, (list, tuple)) else None)
            if legacy is None and all(
                v is None or isinstance(v, (bool, int, float, str)) for v in row
            ):
                legacy = "-".join(str(v) for v in row)
            rows.append((row, legacy))
        combos = [
            (
                {**params, **dict(zip(names, row, strict=True))},
                None if legacy_parts is None or legacy is None else [*legacy_parts, legacy],
            )
            for (params, legacy_parts), (row, legacy) in itertools.product(combos, rows)
        ]
    return [(params, "-".join(parts) if parts else None) for params, parts in combos]


@functools.cache
def suite() -> dict[str, Case]:
    """Every case of the suite by id, in file order."""
    out: dict[str, Case] = {}
    for module, fn in catalog.functions():
        file = f"{CASES_DIR}/{module}.py"
        for params, legacy in _parametrizations(fn):
            cid = case_id(module, fn.__name__, params)
            suffix = f"[{legacy}]" if legacy else ""
            node = f"{module}.py::{fn.__name__}{suffix}"
            old = () if params and not legacy else (f"conformance/{node}", f"{CASES_DIR}/{node}")
            out[cid] = Case(
                cid,
                file,
                fn.__name__,
                tuple(sorted(params.items())),
                tuple(catalog.properties(fn)),
                catalog.guards(fn),
                old,
            )
    return out


@functools.cache
def aliases() -> dict[str, str]:
    """Old id -> current id: this release's renames and loaderspec 0.1's node ids."""
    out = {old: case.id for case in suite().values() for old in case.legacy_ids}
    out.update(RENAMED)
    return out


def canonical(name: str) -> str | None:
    """The current id ``name`` denotes (itself, or the case an alias now names); None if no
    case of the suite, and no function with parametrized cases, has that name."""
    cases = suite()
    if name in cases:
        return name
    if name in aliases():
        return aliases()[name]
    if any(cid.split("[", 1)[0] == name for cid in cases):
        return name  # a function: every one of its parametrized cases
    return None


def covers(entry: str, cid: str) -> bool:
    """Whether expectation entry ``entry`` (a current case id, or a function's id without
    parameters) applies to case ``cid``."""
    return entry == cid or ("[" not in entry and cid.split("[", 1)[0] == entry)
