"""Table-cell text the reports share: a value as written, or a dash where there is none."""

from __future__ import annotations


def dash(value: object) -> str:
    """`str(value)`, or "-" for None (plain-text tables)."""
    return "-" if value is None else str(value)


def formatted(value: object, fmt: str) -> str:
    """`fmt.format(value)`, or "–" for None (Markdown / HTML cells)."""
    return "–" if value is None else fmt.format(value)
