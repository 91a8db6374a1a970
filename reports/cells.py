"""Table-cell text the reports share: a value as written, or a dash where there is none; a Markdown table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def dash(value: object) -> str:
    """`str(value)`, or "-" for None (plain-text tables)."""
    return "-" if value is None else str(value)


def formatted(value: object, fmt: str) -> str:
    """`fmt.format(value)`, or "–" for None (Markdown / HTML cells)."""
    return "–" if value is None else fmt.format(value)


def cell(value: Any) -> str:
    """One table cell: no newline, no bare pipe, None/NaN as an en dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """`align`: one of l/r/c per column (default: left)."""
    align = align or "l" * len(headers)
    marks = {"l": "---", "r": "--:", "c": ":-:"}
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
