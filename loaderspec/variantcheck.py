"""Which properties a broken variant violates: all of them, not only the first one TLC meets.

Owns the "exactly this set" check of ``spec/models.toml``'s broken tier. TLC stops at the first
violation it finds and, with several temporal properties, does not say which one failed; so one
variant takes up to three kinds of run, each on a config derived from the variant's own (its
constants and hook substitutions kept, its INVARIANT and PROPERTY sections replaced):

* A, the whole graph: every invariant at once through ``MCBroken.ViolationMonitor`` (always
  TRUE, it prints the name of each invariant a state violates, so TLC neither stops nor prints a
  trace per violation), plus the temporal properties the variant must not violate; TLC's deadlock
  check on unless NoDeadlock is listed (then ``-deadlock``, so the graph is still explored whole).
  Its distinct states, total states and depth are the figures the manifest records.
* D, when NoDeadlock is listed: TLC's deadlock check alone.
* B, for each temporal property listed: that property alone (``-deadlock -lncheck final``).

Knows how TLC runs (``loaderspec.tlc``) and what a manifest model is, not what the properties
mean.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loaderspec import tlc

if TYPE_CHECKING:
    from loaderspec.manifest import Model

MONITOR = "ViolationMonitor"  # in spec/MCBroken.tla
NO_DEADLOCK = "NoDeadlock"  # TLC's "Deadlock reached" (vocabulary.PropertyName.NO_DEADLOCK)
_VIOLATES_RE = re.compile(r'<<"VIOLATES", "(\w+)">>')
_KEYWORD_RE = re.compile(
    r"^\s*(SPECIFICATION|INIT|NEXT|INVARIANTS?|PROPERTY|PROPERTIES|CONSTANTS?|CONSTRAINTS?"
    r"|ACTION_CONSTRAINTS?|SYMMETRY|VIEW)\b"
)
_DROPPED = {"INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES"}


@dataclass(frozen=True)
class VariantOutcome:
    """The properties a variant was found to violate, from all of its TLC runs."""

    model: Model
    found: frozenset[str]  # property names; "TLCError"/"Timeout" when a run could not finish
    graph: tlc.TlcResult  # run A: the whole graph
    runs: tuple[tlc.TlcResult, ...]

    @property
    def as_expected(self) -> bool:
        return self.found == self.model.violates

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)

    @property
    def cpu_seconds(self) -> float:
        return sum(r.cpu_seconds or 0.0 for r in self.runs)


def without_checks(cfg_text: str) -> str:
    """A TLC config without its INVARIANT(S) and PROPERTY/PROPERTIES sections."""
    kept: list[str] = []
    dropping = False
    for line in cfg_text.splitlines():
        keyword = _KEYWORD_RE.match(line)
        if keyword:
            dropping = keyword.group(1) in _DROPPED
        if not dropping:
            kept.append(line)
    return "\n".join(kept) + "\n"


def check_variant(model: Model, *, timeout_s: float = 300.0) -> VariantOutcome:
    """Run a broken variant as described in the module docstring and collect what it violates.

    Raises:
        tlc.TlcNotFound: no jar or no ``java``.
    """
    temporal = tlc.cfg_properties(model.cfg)
    listed = model.violates
    holds = [p for p in temporal if p not in listed]
    base = without_checks(model.cfg.read_text())
    jvm = tlc.FAST_START if model.fast_start else ()
    found: set[str] = set()
    runs: list[tlc.TlcResult] = []
    with tempfile.TemporaryDirectory(prefix="loaderspec-variant-") as tmp:

        def run(name: str, sections: str, *args: str) -> tlc.TlcResult:
            cfg = Path(tmp) / f"{model.name}{name}.cfg"
            cfg.write_text(base + sections)
            result = tlc.run_tlc(
                model.spec, cfg, extra_args=args, timeout_s=timeout_s, jvm_args=jvm
            )
            runs.append(result)
            if result.violated in (tlc.TLC_ERROR, tlc.TIMED_OUT, tlc.UNNAMED):
                found.add(result.violated)
            return result

        checks = f"INVARIANT {MONITOR}\n" + (f"PROPERTIES {' '.join(holds)}\n" if holds else "")
        flags = (["-deadlock"] if NO_DEADLOCK in listed else []) + (
            ["-lncheck", "final"] if holds else []
        )
        graph = run("Graph", checks, *flags)
        found.update(_VIOLATES_RE.findall(graph.output))
        if graph.violated == tlc.DEADLOCK:
            found.add(NO_DEADLOCK)
        elif graph.violated is not None and graph.violated not in found:
            found.add(graph.violated)  # a temporal property that should hold (named if one)
        if NO_DEADLOCK in listed and run("Deadlock", "").violated == tlc.DEADLOCK:
            found.add(NO_DEADLOCK)
        for prop in temporal:
            if prop in listed:
                result = run(prop, f"PROPERTY {prop}\n", "-deadlock", "-lncheck", "final")
                if result.violated == prop:
                    found.add(prop)
    return VariantOutcome(model, frozenset(found), graph, tuple(runs))
