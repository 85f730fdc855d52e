"""Tables that stay readable in a narrow terminal: whole words, or one block per row.

``Table`` is rich's table with one change: where rich would lay a column out narrower than
its longest word (a table wider than the terminal), it cuts words across lines
(``compl│eted``) or ends them with an ellipsis; this table prints each row as a block of
``header: value`` lines instead, every value wrapped on word boundaries. A table with no
header and two columns (a summary of figures) prints ``figure: value`` lines.

Every table of the CLI is this one (``from trajsynth.cli.tables import Table``).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich import table as rich_table
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.text import Text

__all__ = ["Table", "fits"]

_INDENT = 4  # a value too long for its header's line goes below it, indented this much


def fits(table: rich_table.Table, console: Console, width: int) -> bool:
    """Whether ``table`` renders in ``width`` columns with no word split across lines: the
    widths rich would give the columns (its own layout) hold each column's longest word."""
    options = console.options.update_width(width)
    widths = table._calculate_column_widths(console, options)
    for column, given in zip(table.columns, widths, strict=True):
        needed = table._measure_column(console, options, column).minimum
        if given < needed:
            return False
    return True


class Table(rich_table.Table):
    """A rich table that folds to one block per row instead of splitting words."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if not self.columns or not self.rows or width < 20 or fits(self, console, width):
            yield from super().__rich_console__(console, options)
            return
        yield from self._blocks(console, width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        measured = super().__rich_measure__(console, options)
        # folded, it fits any width: a parent (a panel, a grid) must not squeeze it further
        return Measurement(min(measured.minimum, options.max_width), measured.maximum)

    def _blocks(self, console: Console, width: int) -> Iterable[RenderableType]:
        if self.title:
            yield (
                Text.from_markup(self.title, style="bold")
                if isinstance(self.title, str)
                else self.title
            )
        headers = [_text(console, c.header) for c in self.columns]
        cells = [list(c.cells) for c in self.columns]
        key_value = not self.show_header and len(self.columns) == 2
        for n in range(self.row_count):
            row = [_text(console, col[n]) if n < len(col) else Text("") for col in cells]
            if key_value:
                yield from _field(row[0], row[1], width, indent="")
                continue
            yield Text(f"row {n + 1}", style="bold")
            for i, (header, value) in enumerate(zip(headers, row, strict=True)):
                if value.plain.strip():  # an empty cell says nothing in a block
                    name = header if header.plain else Text(f"column {i + 1}")
                    yield from _field(name, value, width)
        if self.caption:
            yield (
                Text.from_markup(self.caption, style="dim")
                if isinstance(self.caption, str)
                else self.caption
            )


def _text(console: Console, cell: RenderableType) -> Text:
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return console.render_str(cell)
    return Text(str(cell))


def _field(
    header: Text, value: Text, width: int, *, indent: str = "  "
) -> Iterable[RenderableType]:
    """``header: value`` on one line when it fits, else the value indented below it."""
    line = Text(indent).append_text(header).append(": ").append_text(value)
    if "\n" not in value.plain and line.cell_len <= width:
        yield line
        return
    yield Text(indent).append_text(header).append(":")
    yield Padding(value, (0, 0, 0, len(indent) + _INDENT))
