"""Argument types shared by the ``loaderspec`` subcommands: each refuses a bad value with one
line naming it and the fix (argparse prints it as ``error: argument --x: ...``, exit 2)."""

from __future__ import annotations

import argparse
import math

__all__ = ["MAX_SECONDS", "positive_int", "positive_seconds", "whole_number"]

# The longest time limit taken: a day. Past it (inf, 1e9) the limit is a mistake, and the
# operating system's waits cannot take it (an OverflowError after the child was started).
MAX_SECONDS = 86400.0


def positive_seconds(text: str) -> float:
    """A time limit: seconds, more than 0 and at most ``MAX_SECONDS``.

    Raises:
        argparse.ArgumentTypeError: not a number, not more than 0, not finite or too long.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds must be more than 0, e.g. 900")
    if not math.isfinite(value) or value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds must be at most {MAX_SECONDS:g} (a day), e.g. 900"
        )
    return value


def whole_number(text: str, least: int, example: str) -> int:
    """A whole number of ``least`` or more (``example``: the fix the message shows).

    Raises:
        argparse.ArgumentTypeError: not a whole number, or less than ``least``.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: must be {least} or more, e.g. {example}")
    return value


def positive_int(text: str) -> int:
    """A whole number, 1 or more (``--jobs``).

    Raises:
        argparse.ArgumentTypeError: not a whole number of 1 or more.
    """
    return whole_number(text, 1, "2")
