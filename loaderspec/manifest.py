"""``spec/models.toml``, the one source of the spec's models, and the ``.cfg`` files made from it.

Owns what a model is: its tier, its expected result, and its config, written once. The manifest's
``[defaults]`` table gives every CONSTANT of ``spec/DataLoader.tla`` its default value (every
fault off); a model lists only the constants it changes (``constants.X = ...``), the hooks it
substitutes (``substitute.Hook = "BrokenHook"``, for a broken variant), a state ``constraint``,
and, when it checks safety only, ``properties = []``. The invariant and temporal property lines
are the vocabulary's (``loaderspec.vocabulary.PROPERTIES``), so a new property is checked by
every model without editing one. ``load_manifest`` writes each model's plain TLC config (the
syntax the 2020 TLC 2.15 jar reads) into ``build/models/`` of the checkout, or a temporary
folder for an installed wheel; those files are outputs, never edited.

Another spec module gives its constants' defaults in a table ``[defaults.<Module>]``; they apply
to the models whose ``spec`` is ``<Module>.tla`` or an ``MC`` module that EXTENDS it first (as
``MCBroken`` EXTENDS ``DataLoader``). A module that EXTENDS ``DataLoader`` starts from
DataLoader's defaults; one that stands alone (``DataLoaderCheckpoint``) lists all of its own.
Its models check the properties the vocabulary gives that module (``module_properties``).

``loaderspec.scenarios`` and ``loaderspec.tracecompile`` start from the same defaults
(``default_constants``). Knows nothing of how TLC runs (``loaderspec.tlc``).
"""

from __future__ import annotations

import importlib.resources
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from loaderspec.tlavalues import encode
from loaderspec.vocabulary import PROPERTIES, Check, module_properties

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser.
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

TIERS = ("quick", "nightly", "broken")
PASS = "pass"
MANIFEST = "models.toml"
DEFAULTS = "defaults"  # the manifest's table of default constant values
BASE_SPEC = "DataLoader.tla"
BASE_MODULE = "DataLoader"
# The inductive invariant's models (docs/spec.md, "Any number of workers"): they start from every
# state of IndInv, not from Init, so they stand outside the pairwise design and the variants'
# shapes.
INDUCTIVE_SPEC = "MCInductive.tla"
INVARIANTS: tuple[str, ...] = tuple(p.name for p in PROPERTIES if p.check is Check.INVARIANT)
TEMPORAL: tuple[str, ...] = tuple(p.name for p in PROPERTIES if p.check is Check.TEMPORAL)
FIGURES = ("states", "total_states", "depth", "seconds", "cpu_seconds")
_KEYS = {
    "spec",
    "tier",
    "expect",
    "violates",
    "constants",
    "substitute",
    "constraint",
    "properties",
    "invariants",
    "args",
    "fast_start",
    "workers",
    *FIGURES,
}


@dataclass(frozen=True)
class Model:
    """One table of ``spec/models.toml`` (or a user's own cfg: ``constants`` empty)."""

    name: str
    spec: Path
    cfg: Path  # the generated config TLC reads (a user's own file for an ad-hoc model)
    tier: str
    violates: frozenset[str] = frozenset()  # every property TLC finds violated; empty: passes
    args: tuple[str, ...] = ()
    states: int | None = None  # distinct states last recorded
    total_states: int | None = None  # states generated (with repeats) last recorded
    depth: int | None = None  # of the state graph last recorded
    seconds: float | None = None  # wall time last recorded (a loaded 2-core machine)
    cpu_seconds: float | None = None  # TLC's CPU time last recorded: ~ wall time when idle
    fast_start: bool = True  # small model: start the JVM with C1 only (tlc.FAST_START)
    workers: int = 1  # TLC worker threads (-workers): 2 for a long nightly model on 2 cores
    constants: Mapping[str, str] = field(default_factory=dict, compare=False)  # TLA+ text
    properties: tuple[str, ...] = TEMPORAL  # the temporal properties checked (none: safety)
    module: str = BASE_MODULE  # the spec module whose constants and properties the model has

    @property
    def expect(self) -> str:
        """``pass``, or the violated properties, comma-separated (for messages)."""
        return ", ".join(sorted(self.violates)) if self.violates else PASS


def spec_dir() -> Path:
    """``spec/`` of the checkout, or ``loaderspec/spec`` of an installed wheel."""
    return Path(str(importlib.resources.files("loaderspec.spec")))


def build_dir() -> Path:
    """Where the generated configs go: ``build/models`` of the checkout (git ignores it), or a
    per-user temporary folder when the spec is an installed wheel's."""
    root = spec_dir().resolve().parent
    if (root / "pyproject.toml").is_file():
        return root / "build" / "models"
    return Path(tempfile.gettempdir()) / f"loaderspec-models-{os.getuid()}"


def _read(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _extends(spec: Path) -> str | None:
    """The first module ``spec`` EXTENDS (None: it extends none, or does not exist)."""
    if not spec.is_file():
        return None
    found = re.search(r"^EXTENDS\s+(\w+)", spec.read_text(), flags=re.M)
    return found.group(1) if found else None


def module_of(spec: Path) -> str:
    """The spec module whose constants and properties a model of ``spec`` has: its own, or for
    an ``MC`` module (a model's wrapper, broken hooks) the one it EXTENDS first."""
    if spec.stem.startswith("MC"):
        return _extends(spec) or spec.stem
    return spec.stem


def _tla(value: Any) -> str:
    """A manifest value as TLA+ text: a TOML array is a set (a cfg's constants are sets, as
    ``ResumeWorkers = {1, 2}``), anything else as ``tlavalues.encode`` writes it."""
    if isinstance(value, list):
        return "{" + ", ".join(encode(v) for v in value) + "}"
    return encode(value)


@cache
def _defaults(path: Path) -> dict[str, dict[str, str]]:
    """Module -> its constants' defaults as TLA+ text (DataLoader's under ``""`` too)."""
    table = _read(path).get(DEFAULTS, {})
    base = {k: _tla(v) for k, v in table.items() if not isinstance(v, dict)}
    out = {"": base, BASE_MODULE: base}
    for module, extra in table.items():
        if isinstance(extra, dict):
            own = {k: _tla(v) for k, v in extra.items()}
            extends_base = _extends(path.parent / f"{module}.tla") == BASE_MODULE
            out[module] = {**base, **own} if extends_base else own
    return out


def default_constants(module: str = "", **overrides: Any) -> dict[str, str]:
    """Every constant of ``module`` (DataLoader's by default) at its manifest default, with
    ``overrides`` (Python values) applied; values as TLA+ text, in the manifest's order.

    Raises:
        ValueError: an override names a constant the manifest does not declare.
    """
    path = spec_dir() / MANIFEST
    values = dict(_defaults(path.resolve())[module])
    unknown = set(overrides) - set(values)
    if unknown:
        raise ValueError(f"{path}: [defaults] declares no constant {', '.join(sorted(unknown))}")
    values.update({k: _tla(v) for k, v in overrides.items()})
    return values


def cfg_text(
    name: str,
    constants: Mapping[str, str],
    *,
    substitute: Mapping[str, str] | None = None,
    constraint: str | None = None,
    properties: tuple[str, ...] = TEMPORAL,
    invariants: tuple[str, ...] = INVARIANTS,
) -> str:
    """A plain TLC config: constants, hook substitutions, the constraint, ``invariants`` (every
    invariant of the model's module) and ``properties``."""
    lines = [f"\\* Generated from spec/{MANIFEST} [{name}]: edit the manifest, not this file."]
    lines += ["SPECIFICATION Spec", "CONSTANTS"]
    lines += [f"    {k} = {v}" for k, v in constants.items()]
    lines += [f"    {hook} <- {by}" for hook, by in (substitute or {}).items()]
    if constraint:
        lines += ["CONSTRAINT", f"    {constraint}"]
    lines += ["INVARIANTS", "    " + " ".join(invariants)]
    if properties:
        lines += ["PROPERTIES", "    " + " ".join(properties)]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (atomically: runs may share the folder)."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def _model(path: Path, name: str, table: dict[str, Any], out: Path) -> Model:
    def fail(why: str) -> ValueError:
        return ValueError(f"{path}: model [{name}] {why}")

    unknown = set(table) - _KEYS
    if unknown:
        raise fail(f"has unknown key(s) {', '.join(sorted(unknown))}; known: {sorted(_KEYS)}")
    if "tier" not in table:
        raise fail("lacks tier")
    if table["tier"] not in TIERS:
        raise fail(f"has tier {table['tier']!r}; use one of {TIERS}")
    if (table.get("expect") == PASS) == bool(table.get("violates")):
        raise fail("needs expect = 'pass' or violates = [...]")
    spec = table.get("spec", BASE_SPEC)
    module = module_of(path.parent / spec)
    defaults = _defaults(path.resolve())
    if module not in defaults:
        raise fail(f"checks spec module {module}, whose constants need a [{DEFAULTS}.{module}]")
    constants = dict(defaults[module])
    props = module_properties(module)
    # Every invariant of the module, and a model's own (an inductive invariant: MCInductive.tla).
    invariants = tuple(p.name for p in props if p.check is Check.INVARIANT)
    invariants += tuple(table.get("invariants", ()))
    temporal = tuple(p.name for p in props if p.check is Check.TEMPORAL)
    overrides = table.get("constants", {})
    unknown = set(overrides) - set(constants)
    if unknown:
        raise fail(
            f"sets {', '.join(sorted(unknown))}, which [{DEFAULTS}] does not declare"
            " (a typo, or a new CONSTANT whose default belongs there)"
        )
    constants.update({k: _tla(v) for k, v in overrides.items()})
    properties = tuple(table.get("properties", temporal))
    if not set(properties) <= set(temporal):
        raise fail(f"properties must be temporal properties of {module}: {temporal}")
    cfg = out / f"{name}.cfg"
    _write(
        cfg,
        cfg_text(
            name,
            constants,
            substitute=table.get("substitute", {}),
            constraint=table.get("constraint"),
            properties=properties,
            invariants=invariants,
        ),
    )
    return Model(
        name=name,
        spec=(path.parent / spec).resolve(),
        cfg=cfg,
        tier=table["tier"],
        violates=frozenset(table.get("violates", ())),
        args=tuple(table.get("args", ())),
        fast_start=table.get("fast_start", True),
        workers=table.get("workers", 1),
        constants=constants,
        properties=properties,
        module=module,
        **{k: table.get(k) for k in FIGURES},
    )


def load_manifest(path: Path | None = None, *, out: Path | None = None) -> list[Model]:
    """Every model of the manifest, in file order, its cfg written into ``out`` (default
    ``build_dir()``); spec paths resolved against the manifest's folder.

    Raises:
        ValueError: a table has an unknown key, lacks ``tier``, has neither or both of
            ``expect = "pass"`` and ``violates``, names an unknown tier, or sets a constant the
            defaults do not declare.
    """
    path = path or spec_dir() / MANIFEST
    out = out or build_dir()
    data = _read(path)
    data.pop(DEFAULTS, None)
    return [_model(path, name, table, out) for name, table in data.items()]


# --- the coverage statement: which model holds each pair of factors ---------------------------

# The factors of the pairwise design (docs/spec.md, "Models"): a configuration of the loader
# (a constant at a value) and the fault classes, each by the constants that switch it on.
SETTINGS: dict[str, tuple[str, str]] = {  # name -> (constant, TLA+ value)
    "map": ("Iterable", "FALSE"),
    "iterable": ("Iterable", "TRUE"),
    "in order": ("InOrder", "TRUE"),
    "unordered": ("InOrder", "FALSE"),
    "not persistent": ("Persistent", "FALSE"),
    "persistent": ("Persistent", "TRUE"),
    "no pin": ("PinMemory", "FALSE"),
    "pin": ("PinMemory", "TRUE"),
}
FAULT_CLASSES: dict[str, tuple[str, ...]] = {
    "kill": ("WithKillWorker",),
    "parent kill": ("WithKillParent",),
    "hang + timeout": ("WithHang", "WithTimeout"),
    "fetch error": ("WithFetchError",),
    "put error": ("WithPutError",),
    "read error": ("WithRecvError",),
    "pin death": ("WithPinDeath",),
    "blocked put": ("ResultCapacity",),
}
# Sizes (issue 23): held by a model whose constants reach them; no opposite value.
#   PF 3       prefetch_factor 3
#   3 workers  num_workers 3
#   refills    the window is refilled more than once: B >= prefetch_factor * num_workers + 2
SIZES: tuple[str, ...] = ("PF 3", "3 workers", "refills")
# Pairs no model can hold: a read error is the main process's own (no pin thread), a pin thread
# death needs a pin thread.
IMPOSSIBLE: frozenset[frozenset[str]] = frozenset(
    {
        frozenset({"read error", "pin"}),
        frozenset({"pin death", "no pin"}),
        frozenset({"read error", "pin death"}),
    }
)
# Pairs a model could hold but the nightly budget cannot check, each with the reason (the
# coverage statement lists them as not checked). None since issue 23's third round, which
# checks PF 3 x 3 workers (MCNightlyPrefetch3Three, safety only).
UNAFFORDABLE: dict[frozenset[str], str] = {}


def _sizes_of(model: Model) -> set[str]:
    workers, prefetch = int(model.constants["NumWorkers"]), int(model.constants["PrefetchFactor"])
    held = {"PF 3"} if prefetch == 3 else set()
    held |= {"3 workers"} if workers == 3 else set()
    if int(model.constants["NumTasks"]) >= prefetch * workers + 2:
        held.add("refills")
    return held


def factors_of(model: Model) -> frozenset[str]:
    """The settings, fault classes and sizes a model holds."""
    return _factors(model.constants) | _sizes_of(model)


def _factors(constants: Mapping[str, str]) -> frozenset[str]:
    """The settings and fault classes of a model's constants."""
    held = {name for name, (const, value) in SETTINGS.items() if constants[const] == value}
    held |= {
        name
        for name, consts in FAULT_CLASSES.items()
        if all(constants[c] not in ("FALSE", "0") for c in consts)
    }
    return frozenset(held)


def pairs() -> list[frozenset[str]]:
    """Every pair of factors a model could hold: two settings of different constants, a setting
    and a fault class or a size, two fault classes, a fault class and a size, or two sizes
    (the unaffordable ones included: the statement says they are not checked)."""
    names = list(SETTINGS) + list(FAULT_CLASSES) + list(SIZES)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            same = a in SETTINGS and b in SETTINGS and SETTINGS[a][0] == SETTINGS[b][0]
            if not same and frozenset({a, b}) not in IMPOSSIBLE:
                out.append(frozenset({a, b}))
    return out


def coverage(models: list[Model]) -> dict[frozenset[str], list[Model]]:
    """Each pair -> the passing models of DataLoader.tla (quick, then nightly) that hold it."""
    passing = [m for m in _runs_from_init(models) if m.tier in ("quick", "nightly")]
    return {p: [m for m in passing if p <= factors_of(m)] for p in pairs()}


def _runs_from_init(models: list[Model]) -> list[Model]:
    """The models of DataLoader.tla that run its Spec from Init (not the inductive invariant's)."""
    return [m for m in models if m.module == BASE_MODULE and m.spec.name != INDUCTIVE_SPEC]


def coverage_table(models: list[Model]) -> str:
    """The coverage statement as a Markdown table: every pair and the models holding it, three
    named, liveness models first ("(safety)" marks a model that checks no temporal property;
    **none**: no model holds it)."""
    names = list(SETTINGS) + list(FAULT_CLASSES) + list(SIZES)
    lines = ["| pair | models that hold it |", "| --- | --- |"]
    for pair, holders in coverage(models).items():
        a, b = sorted(pair, key=names.index)
        # liveness models first, then safety-only ones; three named, the rest counted
        cells = [m.name + ("" if m.properties else " (safety)") for m in holders]
        cells = sorted(cells, key=lambda c: c.endswith("(safety)"))
        more = f" and {len(cells) - 3} more" if len(cells) > 3 else ""
        none = f"not checked: {UNAFFORDABLE[pair]}" if pair in UNAFFORDABLE else "**none**"
        lines.append(f"| {a} x {b} | {', '.join(cells[:3]) + more or none} |")
    return "\n".join(lines) + "\n"


# --- which tier can reject each broken variant: the models that hold its shape (issue 38) -------


def holds_shape(model: Model, variant: Model) -> bool:
    """Whether ``model`` runs the loader a broken variant gets wrong: every setting (map or
    iterable, in order or not, persistent or not, pin thread or not) other than the default and
    every fault class that the variant's constants switch on, and, for a variant that breaks a
    temporal property, a liveness check. A static statement: TLC on the model with the
    variant's hooks is what shows the violation (docs/spec.md, "Which tier rejects each
    variant")."""
    temporal = variant.violates & set(TEMPORAL)
    if temporal and not temporal <= set(model.properties):
        return False
    chosen = _factors(variant.constants) - _factors(default_constants())
    return chosen <= factors_of(model)


def variant_shapes(models: list[Model]) -> dict[str, dict[str, list[str]]]:
    """Each broken variant of DataLoader.tla -> tier -> the passing models of that tier that
    hold its shape."""
    variants = [m for m in models if m.tier == "broken" and m.module == BASE_MODULE]
    tiers = ("quick", "nightly")
    return {
        v.name: {
            t: [m.name for m in _runs_from_init(models) if m.tier == t and holds_shape(m, v)]
            for t in tiers
        }
        for v in variants
    }


def variant_table(models: list[Model]) -> str:
    """The variants statement as a Markdown table: each broken variant, the properties it
    violates, and the quick and nightly models that hold its shape (two named, the rest
    counted; **none**: that tier cannot reject it)."""

    def cell(names: list[str]) -> str:
        more = f" and {len(names) - 2} more" if len(names) > 2 else ""
        return ", ".join(names[:2]) + more if names else "**none**"

    by_name = {m.name: m for m in models}
    lines = ["| variant | violates | quick | nightly |", "| --- | --- | --- | --- |"]
    for name, tiers in variant_shapes(models).items():
        violates = ", ".join(sorted(by_name[name].violates))
        lines.append(f"| {name} | {violates} | {cell(tiers['quick'])} | {cell(tiers['nightly'])} |")
    return "\n".join(lines) + "\n"
