"""One drawn example of a drawn case, as a line of text that replays it alone.

A drawn case's FAIL records the example it failed on (`encode`: the case's id and the example,
pickled, compressed, base64 without padding), and its replay line passes that text back with
`--conformance-replay-draw`: the plugin `decode`s it, runs only that case, and the case's
`check_drawn` plays that one example once (`replaying`) instead of drawing examples. The text is
what the run recorded for the user to paste back, not data from elsewhere: unpickling it imports
the example's classes (the suite's own) and nothing else is read.
"""

from __future__ import annotations

import base64
import binascii
import pickle
import zlib
from dataclasses import dataclass
from typing import Any

__all__ = ["DRAW_ATTR", "MSG_BAD_DRAW", "Draw", "decode", "encode", "replay", "replaying"]

MSG_BAD_DRAW = (
    "--conformance-replay-draw={value!r}: not a draw this suite recorded ({error}); copy the"
    " whole 'replay:' line of the FAIL (or the case's \"draw\" in report.json)"
)


@dataclass(frozen=True)
class Draw:
    """The example `example` of the drawn case `case` (its stable id)."""

    case: str
    example: Any


# The attribute of a drawn case's failure that holds the example it failed on (the plugin
# records it with the FAIL).
DRAW_ATTR = "loaderspec_draw"
_REPLAY: list[Draw] = []  # the draw this run replays (set by the plugin), at most one


def encode(case: str, example: Any) -> str:
    """`example` of case `case` as one command-line word ("" when it does not pickle)."""
    try:
        raw = pickle.dumps((case, example), protocol=4)
    except Exception:  # an example a case built from local objects
        return ""
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode(text: str) -> Draw:
    """The draw `encode` wrote.

    Raises:
        ValueError: `text` is not one (`MSG_BAD_DRAW`, naming why).
    """
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        case, example = pickle.loads(raw)  # the run's own record: see the docstring
    except (binascii.Error, zlib.error, pickle.UnpicklingError, ValueError, TypeError) as exc:
        raise ValueError(MSG_BAD_DRAW.format(value=_short(text), error=exc)) from None
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            MSG_BAD_DRAW.format(value=_short(text), error=f"recorded by another version: {exc}")
        ) from None
    if not isinstance(case, str):
        raise ValueError(MSG_BAD_DRAW.format(value=_short(text), error="no case named"))
    return Draw(case, example)


def replay(draw: Draw | None) -> None:
    """Make this process's drawn cases replay `draw` (None: draw examples as usual)."""
    _REPLAY[:] = [] if draw is None else [draw]


def replaying() -> Draw | None:
    """The draw to replay in this run, if any."""
    return _REPLAY[0] if _REPLAY else None


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
