"""`loaderspec modelcheck`: placeholder until its issue lands."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options yet."""


def run(args: argparse.Namespace) -> int:
    """Not implemented yet: say so instead of pretending to succeed."""
    print("loaderspec modelcheck: not implemented yet")
    return 2
