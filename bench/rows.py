"""One figure of the benchmark: a row with a value or the reason it has none.

Owns the row type, its text and JSON forms. Knows nothing of loaders or measurements.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure. ``value`` is None when it could not be measured; ``note`` then says why.

    ``bound``: with no value, a lower bound the figure is known to exceed (a wait that reached
    its deadline), so a ratio can still be stated as "more than".
    """

    section: str
    name: str
    value: float | None
    unit: str
    note: str = ""
    bound: float | None = None

    def text(self, width: int) -> str:
        """The row as one aligned line: name, value with unit (or the n/a reason), note."""
        if self.value is None:
            # The note says why: "n/a: <reason>", or a bound such as "> 6 s: ...".
            return f"{self.name:<{width}}  {self.note or 'n/a'}"
        value = f"{self.value:,.3g}" if abs(self.value) < 100 else f"{self.value:,.0f}"
        note = f"  ({self.note})" if self.note else ""
        return f"{self.name:<{width}}  {value} {self.unit}{note}"


def na(reason: object) -> str:
    """A row note for a figure that could not be measured, from a reason or an exception."""
    if isinstance(reason, BaseException):
        text = f"{type(reason).__name__}: {reason}".splitlines()[0]
    else:
        text = str(reason)
    return f"n/a: {text[:200]}"


def render(rows: Iterable[Row]) -> str:
    """All rows as text, grouped under their section."""
    rows = list(rows)
    width = max((len(r.name) for r in rows), default=0)
    lines: list[str] = []
    section = None
    for row in rows:
        if row.section != section:
            section = row.section
            lines.append(f"\n== {section} ==")
        lines.append(row.text(width))
    return "\n".join(lines).lstrip("\n")


def to_json(rows: Iterable[Row], meta: dict[str, object]) -> str:
    """All rows and the run's metadata (machine, versions, mode) as a JSON document."""
    return json.dumps(
        {"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2, sort_keys=False
    )
