"""Choosing the loader under test: ``--conformance-loader`` (or ``--loader``),
``LOADERSPEC_LOADER``, ini ``loaderspec_loader``, else the reference loader.

Precedence: the command-line option, then the environment variable, then the ini key, then the
default. Importing the choice is ``faultinject.loaders.resolve``'s job (the one resolver of
``pkg.mod:Class`` names); its messages name the value, where it came from and the fix. The
directory pytest was started from is importable (``importable_from``), as it is for
``python -m pytest``, so a loader module beside the user needs no ``PYTHONPATH``.

A set environment variable that looks like one of loaderspec's but is not (``misspelled``) must
not silently leave the choice to the default: the plugin refuses such a run (and warns when the
loader was named another way). The message constants are imported by the plugin's tests, so the
wording users see cannot drift from what the tests check.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderspec.faultinject import loaders
from loaderspec.faultinject.loaders import (
    FIX,
    MSG_MALFORMED,
    MSG_NO_ATTR,
    MSG_NO_MODULE,
    MSG_NOT_CALLABLE,
    LoaderRefError,
)

from loaderspec.vocabulary import (
    DEFAULT_LOADER,
    LOADER_ENV,
    LOADER_INI,
    LOADER_OPTION,
    LOADER_SHORT_OPTION,
)

__all__ = [
    "DEFAULT",
    "ENV_VAR",
    "FIX",
    "INI_KEY",
    "KNOWN_ENV",
    "MSG_MALFORMED",
    "MSG_MISSPELLED",
    "MSG_NOT_CALLABLE",
    "MSG_NOT_OURS",
    "MSG_NO_ATTR",
    "MSG_NO_MODULE",
    "MSG_UNBUILDABLE",
    "OPTION",
    "SHORT_OPTION",
    "Choice",
    "LoaderRefError",
    "build_once",
    "choose",
    "importable_from",
    "misspelled",
    "passed_elsewhere",
    "resolve",
]

ENV_VAR = LOADER_ENV
DEFAULT = DEFAULT_LOADER
INI_KEY = LOADER_INI
OPTION = LOADER_OPTION
SHORT_OPTION = LOADER_SHORT_OPTION

SOURCE_OPTION = f"option {OPTION}"
SOURCE_SHORT_OPTION = f"option {SHORT_OPTION}"
SOURCE_ENV = f"env {ENV_VAR}"
SOURCE_INI = f"ini {INI_KEY}"
SOURCE_DEFAULT = "default"

# Every environment variable loaderspec (its tools, tests and scripts) reads; a test checks the
# tree names no other LOADERSPEC_* variable.
KNOWN_ENV = frozenset(
    {
        ENV_VAR,
        "LOADERSPEC_BROKEN_PLAN",
        "LOADERSPEC_CACHE_DIR",
        "LOADERSPEC_EXTRAS",
        "LOADERSPEC_FORCE_PIN_THREAD",
        "LOADERSPEC_NIGHTLY",
        "LOADERSPEC_RESUME_RUNS",
        "LOADERSPEC_RESUME_TRACED",
        "LOADERSPEC_SCREENSHOTS",
        "LOADERSPEC_SDL_RUNS",
        "LOADERSPEC_TRACE_DIR",
        "LOADERSPEC_TRACE_RUNS",
    }
)
MSG_MISSPELLED = (
    "environment variable {names} is not one loaderspec reads{near}; no loader was named "
    "otherwise, so this run would silently check the default loader ({default}): fix the "
    "variable's name, or name the loader with {option}"
)
MSG_MISSPELLED_WARNING = "environment variable {names} is not one loaderspec reads{near}"
MSG_NOT_OURS = (
    "{where} passes a loader to {given}, but that option is not loaderspec's here (a "
    "conftest or plugin defines it), so this run would check the default loader ({default}) "
    "instead: name the loader with {option}={value}"
)
# Why the header's loader won, by its source.
WHY = {
    SOURCE_OPTION: "named on the command line",
    SOURCE_SHORT_OPTION: "named on the command line",
    SOURCE_ENV: "set in the environment",
    SOURCE_INI: "set in the ini file",
    SOURCE_DEFAULT: f"no {LOADER_OPTION}, {ENV_VAR} or ini {INI_KEY} named one",
}
MSG_UNBUILDABLE = (
    "loader {value!r} (from {source}) cannot be built: {error} (raised at {where}); the suite "
    "builds it as torch's DataLoader({call}) and every case would FAIL on this: fix the "
    "constructor, or give an adapter class that builds your loader from torch's arguments "
    "(docs/faultinject.md, loader adapters)"
)
# How the suite's smallest case builds a loader (no workers): a constructor that raises here
# raises in every case. NotImplementedError, or a TypeError naming one of these arguments, is a
# refusal of this configuration (the cases that need another say so), not a broken loader.
BUILD_CALL = "dataset of 4 items, batch_size=2"
MSG_A_MODULE = (
    "loader {value!r} (from {source}) names a module, not a class in it: name the class as "
    "'{value}:Class'{found}"
)
NO_MODULE_HINT = (
    " (the directory pytest started in, {cwd}, is importable; a module elsewhere needs "
    "PYTHONPATH=its folder, or pip install)"
)


@dataclass(frozen=True)
class Choice:
    """The loader reference that won, and where it came from."""

    value: str
    source: str


def choose(
    option: str | None,
    ini: str | None,
    environ: Mapping[str, str] | None = None,
    short_option: str | None = None,
) -> Choice:
    """Apply the precedence: option (long, then short) > environment > ini > default."""
    env = os.environ if environ is None else environ
    if option:
        return Choice(option, SOURCE_OPTION)
    if short_option:
        return Choice(short_option, SOURCE_SHORT_OPTION)
    if env.get(ENV_VAR):
        return Choice(env[ENV_VAR], SOURCE_ENV)
    if ini:
        return Choice(ini, SOURCE_INI)
    return Choice(DEFAULT, SOURCE_DEFAULT)


def passed_elsewhere(args: list[str]) -> tuple[str, str] | None:
    """The first loader-like option of the command line that is not loaderspec's long one:
    (``--loader=x`` as given, its value), or None. ``--loader`` belongs to whoever defined it
    first; when that is a user's conftest, its value never reaches loaderspec."""
    for i, arg in enumerate(args):
        if not arg.startswith("--") or arg.startswith(LOADER_OPTION):
            continue
        name, eq, value = arg.partition("=")
        if "loader" not in name.lower():
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
        if value:
            return f"{name}={value}", value
    return None


def misspelled(environ: Mapping[str, str] | None = None) -> tuple[list[str], str]:
    """Set variables that look like loaderspec's but are not (named LOADERSPEC*, or close to
    ``LOADERSPEC_LOADER``), and a hint naming the nearest known one ("" if none)."""
    env = os.environ if environ is None else environ
    unknown = sorted(
        name
        for name in env
        if name not in KNOWN_ENV
        and (
            name.upper().startswith("LOADERSPEC")
            or difflib.SequenceMatcher(None, name.upper(), ENV_VAR).ratio() >= 0.85
        )
    )
    near = {m for name in unknown for m in difflib.get_close_matches(name, KNOWN_ENV, n=1)}
    hint = f" (did you mean {', '.join(sorted(near))}?)" if near else ""
    return unknown, hint


def importable_from(directory: Path) -> None:
    """Put ``directory`` (where pytest started) at the end of ``sys.path``, so that the user's
    own modules there are importable without shadowing anything installed."""
    if str(directory) not in sys.path:
        sys.path.append(str(directory))


def build_once(loader: type, choice: Choice) -> None:
    """Build ``loader`` as the suite's smallest case does, in this process, and drop it.

    Raises:
        LoaderRefError: the constructor raised (anything but a refusal of the configuration),
            naming the exception and the frame it was raised in.
    """
    import gc
    import traceback

    from loaderspec.faultinject.datasets import FaultyDataset

    try:
        built = loader(FaultyDataset(4), batch_size=2)
    except NotImplementedError:
        return
    except Exception as exc:
        if isinstance(exc, TypeError) and "unexpected keyword argument 'batch_size'" in str(exc):
            return
        frames = traceback.extract_tb(exc.__traceback__)
        where = (
            f"{frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name}" if frames else "?"
        )
        raise LoaderRefError(
            MSG_UNBUILDABLE.format(
                value=choice.value,
                source=choice.source,
                error=f"{type(exc).__name__}: {exc}",
                where=where,
                call=BUILD_CALL,
            )
        ) from None
    del built
    gc.collect()


def _module_named(value: str) -> Any:
    """The module ``value`` names, when it names an importable module (else None)."""
    if ":" in value or not all(p.isidentifier() for p in value.split(".")):
        return None
    try:
        return importlib.import_module(value)
    except Exception:  # not a module: the resolver's own message stands
        return None


def _defined_class(obj: object, module: Any) -> bool:
    return isinstance(obj, type) and obj.__module__ == module.__name__


def resolve(choice: Choice, cwd: Path | None = None) -> type:
    """Import the loader class named by ``choice``.

    Raises:
        LoaderRefError: malformed reference, missing module or attribute, or not callable.
    """
    try:
        return loaders.resolve(choice.value, choice.source)
    except LoaderRefError as exc:
        module = _module_named(choice.value)
        if module is not None:
            classes = sorted(n for n, v in vars(module).items() if _defined_class(v, module))
            found = f" (classes defined there: {', '.join(classes)})" if classes else ""
            raise LoaderRefError(MSG_A_MODULE.format(found=found, **vars(choice))) from None
        if cwd is not None and "cannot import module" in str(exc):
            raise LoaderRefError(str(exc) + NO_MODULE_HINT.format(cwd=cwd)) from None
        raise
