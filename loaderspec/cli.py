"""The ``loaderspec`` command: one subcommand per job, each implemented in its own module.

This module only parses the command line and dispatches; it must not know how TLC runs or how a
report is built, so each subcommand's module is imported only when that subcommand is chosen.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from loaderspec import __version__

# subcommand -> (module exposing add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "model-check": ("loaderspec.modelcheck", "run TLC on the spec's models"),
    "trace-check": ("loaderspec.tracecheck", "check reference-loader traces against the spec"),
    "report": ("loaderspec.report", "run the conformance suite and write the report matrix"),
}


def build_parser() -> argparse.ArgumentParser:
    """The full parser; each subcommand's module adds its own arguments."""
    parser = argparse.ArgumentParser(prog="loaderspec", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"loaderspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loaderspec`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    return int(module.run(args))


if __name__ == "__main__":
    sys.exit(main())
