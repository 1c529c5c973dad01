"""Choosing the loader under test: ``--loader``, ``LOADERSPEC_LOADER``, ini ``loaderspec_loader``.

Precedence: the command-line option, then the environment variable, then the ini key, then the
default (the reference loader). Importing the choice is ``faultinject.loaders.resolve``'s job
(the one resolver of ``pkg.mod:Class`` names); its messages name the value, where it came from
and the fix. The message constants are imported by the plugin's tests, so the wording users see
cannot drift from what the tests check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from faultinject import loaders
from faultinject.loaders import (
    FIX,
    MSG_MALFORMED,
    MSG_NO_ATTR,
    MSG_NO_MODULE,
    MSG_NOT_CALLABLE,
    LoaderRefError,
)
from loaderspec.vocabulary import LOADER_ENV

__all__ = [
    "DEFAULT",
    "ENV_VAR",
    "FIX",
    "INI_KEY",
    "MSG_MALFORMED",
    "MSG_NOT_CALLABLE",
    "MSG_NO_ATTR",
    "MSG_NO_MODULE",
    "OPTION",
    "Choice",
    "LoaderRefError",
    "choose",
    "resolve",
]

OPTION = "--loader"
ENV_VAR = LOADER_ENV
INI_KEY = "loaderspec_loader"
DEFAULT = "reference:DataLoader"

SOURCE_OPTION = "option --loader"
SOURCE_ENV = f"env {ENV_VAR}"
SOURCE_INI = f"ini {INI_KEY}"
SOURCE_DEFAULT = "default"


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


def resolve(choice: Choice) -> type:
    """Import the loader class named by ``choice``.

    Raises:
        LoaderRefError: malformed reference, missing module or attribute, or not callable.
    """
    return loaders.resolve(choice.value, choice.source)
