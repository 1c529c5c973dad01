"""The ``loaderspec`` command: one subcommand per job, each implemented in its own module.

This module only parses the command line and dispatches; it must not know how TLC runs or how a
report is built, so each subcommand's module is imported only when that subcommand is chosen.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

from loaderspec import __version__

# subcommand -> (module exposing add_arguments(parser) and run(args) -> int, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "model-check": ("loaderspec.modelcheck", "run TLC on the spec's models"),
    "trace-check": ("loaderspec.tracecheck", "check reference-loader traces against the spec"),
    "report": ("loaderspec.report", "run the conformance suite and write the report matrix"),
}


DESCRIPTION = """\
Check PyTorch DataLoader's protocol: the TLA+ spec's models with TLC, the reference
loader's traces against the spec, and loaders against the conformance suite."""
EXAMPLES = """examples:
  loaderspec model-check --tier quick          the spec's quick models, with TLC
  loaderspec model-check --model BrokenPrefetchBound
                                               one broken variant and its counterexample
  loaderspec report --loader mypkg.loader:MyLoader --quick --out OUT
                                               grade a loader; OUT/matrix.md, OUT/<loader>/
  loaderspec COMMAND --help                    a command's options

The conformance suite also runs under pytest:
  pytest --pyargs loaderspec.conformance --conformance-loader=mypkg.loader:MyLoader"""


def build_parser() -> argparse.ArgumentParser:
    """The full parser; each subcommand's module adds its own arguments."""
    parser = argparse.ArgumentParser(
        prog="loaderspec",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loaderspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loaderspec`` console script; returns the exit status.

    SIGTERM stops a subcommand as Ctrl-C does, so that the processes it started (TLC, a
    suite's pytest) are killed by PID on the way out; either exits 130 without a traceback.
    """
    args = build_parser().parse_args(argv)
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    before = signal.signal(signal.SIGTERM, _stop) if _main_thread() else None
    try:
        return int(module.run(args))
    except KeyboardInterrupt as exc:
        print(f"loaderspec {args.command}: stopped ({exc or 'SIGINT'})", file=sys.stderr)
        return 130
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
