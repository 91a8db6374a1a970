"""Narrow terminals lose nothing: a table that cannot fit the terminal's width without cutting a
cell ("10…" for compute capability 10.0, an emptied UUID column) is printed stacked instead, one
block per row with each column's header before its value, which the terminal wraps as it likes.
"""

from __future__ import annotations

import io
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

FOLDED_MIN = 8  # a folding column (a UUID) is readable down to this many characters a line


class FittingConsole(Console):
    """A rich Console whose `print` stacks the tables (also inside a Group) that are too wide."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().print(*(fit(obj, self) for obj in objects), **kwargs)


def fit(renderable: Any, console: Console) -> Any:
    """`renderable` as printed on `console`: a too-wide table stacked, anything else unchanged."""
    if isinstance(renderable, Group):
        return Group(*(fit(part, console) for part in renderable.renderables))
    if isinstance(renderable, Table) and too_wide(renderable, console):
        return stacked(renderable, console)
    return renderable


def too_wide(table: Table, console: Console) -> bool:
    """The table's narrowest form (every no_wrap cell whole, every other cell wrapped at its longest
    word) is wider than the terminal: rich would cut cells with "…" or empty whole columns."""
    _top, right, _bottom, left = Padding.unpack(table.padding)
    narrowest = sum(_narrowest(column, console) + left + right for column in table.columns)
    return narrowest + table._extra_width > console.width or _cut_when_drawn(table, console)


def _cut_when_drawn(table: Table, console: Console) -> bool:
    """rich shares the width out column by column and can still cut a header or cell with "…"
    where a narrowest form would fit: draw it once at this width and look."""
    if any("…" in _text(cell, console).plain for column in table.columns for cell in (column.header, *column.cells)):
        return False  # the data's own ellipsis: nothing to tell apart
    probe = Console(file=io.StringIO(), width=console.width, no_color=True, highlight=False, legacy_windows=False)
    probe.print(table)
    return "…" in probe.file.getvalue()  # type: ignore[attr-defined]


def _narrowest(column: Column, console: Console) -> int:
    texts = [_text(cell, console).plain for cell in (column.header, *column.cells)]
    if column.no_wrap:
        return max((cell_len(line) for text in texts for line in text.splitlines() or [""]), default=0)
    longest_word = max((cell_len(word) for text in texts for word in text.split()), default=0)
    return min(longest_word, FOLDED_MIN) if column.overflow == "fold" else longest_word  # fold: cut, never lost


def stacked(table: Table, console: Console) -> Group:
    """One block per row: the first column's header and value as its title, then `header: value`
    for every other non-empty cell, indented."""
    headers = [_text(column.header, console).plain for column in table.columns]
    columns = [list(column.cells) for column in table.columns]
    lines: list[RenderableType] = []
    if table.title:
        lines.append(_text(table.title, console))
    for row in range(table.row_count):
        cells = [_text(column[row], console) if row < len(column) else Text("") for column in columns]
        title_at = next((i for i, cell in enumerate(cells) if cell.plain.strip()), 0)
        lines.append(Text.assemble((f"{headers[title_at]}: " if headers[title_at] else "", "bold"), cells[title_at]))
        for header, cell in list(zip(headers, cells))[title_at + 1:]:
            if cell.plain.strip():
                lines.append(Text.assemble(f"  {header}: " if header else "  ", cell))
    return Group(*lines)


def _text(cell: object, console: Console) -> Text:
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return console.render_str(cell)
    return Text(str(cell))
