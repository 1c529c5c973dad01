"""Choosing the loader under test: ``--loader``, ``LOADERSPEC_LOADER``, ini ``loaderspec_loader``.

Precedence: the command-line option, then the environment variable, then the ini key, then the
default (the reference loader). The message constants are imported by the plugin's tests, so the
wording users see cannot drift from what the tests check.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

OPTION = "--loader"
ENV_VAR = "LOADERSPEC_LOADER"
INI_KEY = "loaderspec_loader"
DEFAULT = "reference:DataLoader"

SOURCE_OPTION = "option --loader"
SOURCE_ENV = f"env {ENV_VAR}"
SOURCE_INI = f"ini {INI_KEY}"
SOURCE_DEFAULT = "default"

FIX = (
    "give an importable class as 'package.module:Class' or 'package.module.Class', "
    "e.g. --loader=torch.utils.data:DataLoader"
)
MSG_MALFORMED = "loader {value!r} (from {source}) is not of the form 'package.module:Class'; " + FIX
MSG_NO_MODULE = "loader {value!r} (from {source}): cannot import module {module!r}: {error}; " + FIX
MSG_NO_ATTR = (
    "loader {value!r} (from {source}): module {module!r} has no attribute {attr!r}; " + FIX
)
MSG_NOT_CALLABLE = (
    "loader {value!r} (from {source}) names {kind}, not a class or callable taking "
    "torch DataLoader's arguments; " + FIX
)


class LoaderRefError(ValueError):
    """A loader reference that cannot be used; the message says why and how to fix it."""


@dataclass(frozen=True)
class Choice:
    """The loader reference that won, and where it came from."""

    value: str
    source: str


def choose(option: str | None, ini: str | None, environ: dict[str, str] | None = None) -> Choice:
    """Apply the precedence: option > environment > ini > default."""
    env = os.environ if environ is None else environ
    if option:
        return Choice(option, SOURCE_OPTION)
    if env.get(ENV_VAR):
        return Choice(env[ENV_VAR], SOURCE_ENV)
    if ini:
        return Choice(ini, SOURCE_INI)
    return Choice(DEFAULT, SOURCE_DEFAULT)


def split(value: str) -> tuple[str, str]:
    """``pkg.mod:Attr.Path`` or ``pkg.mod.Class`` -> (module, attribute path)."""
    if ":" in value:
        module, _, attr = value.partition(":")
    else:
        module, _, attr = value.rpartition(".")
    ok = module and attr and ":" not in attr
    ok = ok and all(p.isidentifier() for p in module.split(".") + attr.split("."))
    if not ok:
        raise ValueError(value)
    return module, attr


def resolve(choice: Choice) -> type:
    """Import the loader class named by ``choice``.

    Raises:
        LoaderRefError: malformed reference, missing module or attribute, or not callable.
    """
    fields = {"value": choice.value, "source": choice.source}
    try:
        module_name, attr = split(choice.value.strip())
    except ValueError:
        raise LoaderRefError(MSG_MALFORMED.format(**fields)) from None
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a user's package is a usage problem
        raise LoaderRefError(
            MSG_NO_MODULE.format(module=module_name, error=f"{type(exc).__name__}: {exc}", **fields)
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoaderRefError(MSG_NO_ATTR.format(module=module_name, attr=attr, **fields))
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoaderRefError(MSG_NOT_CALLABLE.format(kind=type(obj).__name__, **fields))
    return obj  # type: ignore[return-value]
