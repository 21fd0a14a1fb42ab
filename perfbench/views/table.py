"""A table of short text cells that prints like rich's `Table` (heavy head box, title, caption) at a fraction of
its cost: rich lays out and renders every cell on its own (~0.1 ms a cell: 0.82 CPU-s for `perfbench ls` on 500
runs, ~7,500 cells), this formats each row as one line (0.015 CPU-s; docs/benchmarks.md, "CLI start-up"). Cells
are strings with optional rich markup (`[red]failed[/red]`); columns never wrap. When the table is wider than the
console, it prints as a rich `Table` with the same columns and rows instead, which shrinks columns to fit."""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text


@dataclass
class _Column:
    header: str
    justify: str = "left"


class FastTable:
    """The part of rich.table.Table's interface the results tables use: add_column(header, justify=...,
    no_wrap=True), add_row(*cells), title, caption; printed with `Console.print`."""

    def __init__(self, title: str | None = None, caption: str | None = None):
        self.title = title
        self.caption = caption
        self.columns: list[_Column] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, header: str = "", justify: str = "left", no_wrap: bool = True) -> None:
        self.columns.append(_Column(header, justify))

    def add_row(self, *cells: str) -> None:
        self.rows.append(tuple(cells))

    def to_rich(self) -> Table:
        """The same table as a rich Table (what prints when it does not fit the console)."""
        t = Table(title=self.title, caption=self.caption, show_lines=False)
        for c in self.columns:
            t.add_column(c.header, justify=c.justify, no_wrap=True)  # type: ignore[arg-type]
        for r in self.rows:
            t.add_row(*r)
        return t

    def _widths(self, body: list) -> list[int]:
        widths = [cell_len(c.header) for c in self.columns]
        for r in body:
            for i, cell in enumerate(r):
                widths[i] = max(widths[i], _len(cell))
        return [w + 2 for w in widths]  # one space each side, as rich pads cells

    def natural_width(self) -> int:
        """The columns it needs to print every cell whole (the box's edges and dividers included)."""
        widths = self._widths([[_text(c) for c in r] for r in self.rows])
        return sum(widths) + len(widths) + 1

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        body = [[_text(c) for c in r] for r in self.rows]
        widths = self._widths(body)
        table_width = sum(widths) + len(widths) + 1  # the box's edges and dividers
        if not self.columns or table_width > options.max_width:
            yield self.to_rich()
            return
        annotation = options.update(width=table_width, highlight=False, height=None, justify="center")
        if self.title:
            yield from console.render(console.render_str(self.title, style="table.title", highlight=False), annotation)
        b = box.HEAVY_HEAD.substitute(options, safe=console.safe_box)
        yield Segment(b.get_top(widths))
        yield Segment.line()
        yield from self._line(
            console,
            [Text(c.header) for c in self.columns],
            widths,
            b.head_left,
            b.head_vertical,
            b.head_right,
            style=console.get_style("table.header"),
        )
        yield Segment(b.get_row(widths, "head", edge=True))
        yield Segment.line()
        right = [c.justify == "right" for c in self.columns]
        for r in body:
            yield from _body_line(console, r, widths, right, b.mid_left, b.mid_vertical, b.mid_right)
        yield Segment(b.get_bottom(widths))
        yield Segment.line()
        if self.caption:
            yield from console.render(
                console.render_str(self.caption, style="table.caption", highlight=False), annotation
            )

    def _line(
        self,
        console: Console,
        cells: list[Text],
        widths: list[int],
        left: str,
        divider: str,
        right: str,
        style: Style | str = "",
    ):
        """One row: each cell padded to its column's width like rich pads it (a space each side, the cell's text
        justified between), in `style` (the header's), the box's characters between."""
        line = Text(left)
        for i, (cell, width, col) in enumerate(zip(cells, widths, self.columns)):
            pad = " " * (width - 2 - cell.cell_len)
            line.append(" ", style)
            line.append_text(
                Text.assemble(pad, cell, style=style)
                if col.justify == "right"
                else Text.assemble(cell, pad, style=style)
            )
            line.append(" ", style)
            line.append(divider if i < len(cells) - 1 else right)
        yield from line.render(console, end="\n")


def _body_line(
    console: Console, cells: list[str | Text], widths: list[int], right: list[bool], left: str, divider: str, end: str
):
    """A row of unstyled cells, as `FastTable._line` pads them; the plain text between styled cells (markup) goes
    out as one segment."""
    plain = [left]
    last = len(cells) - 1
    for i, cell in enumerate(cells):
        pad = " " * (widths[i] - 2 - _len(cell))
        sep = divider if i < last else end
        if isinstance(cell, str):
            plain.append(f" {pad}{cell} {sep}" if right[i] else f" {cell}{pad} {sep}")
            continue
        plain.append(f" {pad}" if right[i] else " ")
        yield Segment("".join(plain))
        yield from cell.render(console)
        plain = [f" {sep}" if right[i] else f"{pad} {sep}"]
    plain.append("\n")
    yield Segment("".join(plain))


def _text(cell: str) -> str | Text:
    """A cell as printed: its markup parsed (a Text) when it has any, else the string itself."""
    return Text.from_markup(cell) if "[" in cell else cell


def _len(cell: str | Text) -> int:
    return cell_len(cell) if isinstance(cell, str) else cell.cell_len
