"""perfbench.views.table.FastTable prints exactly what rich's own Table prints for the same columns and rows (the
reference is rich itself), with markup cells (a failed run, a pruned one, the ⚠ of an unsteady one), in colour
and without, and falls back to rich's Table (shrunk columns) when the console is narrower than the table."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from perfbench.views.table import FastTable

ROWS = [
    ("ws1-r0", "ok", "resnet50", "1", "1234", "6.5", "-"),
    ("ws2-r0", "[red]failed[/red]", "resnet50", "2", "-", "-", "-"),
    ("ws2-r1", "ok [yellow]⚠[/yellow]", "resnet50", "2", "2301", "7.0", "92.1%"),
    ("ws4-r0", "[yellow]pruned[/yellow]", "moe", "4", "4410", "7.3", "88.0%"),
]


def table() -> FastTable:
    t = FastTable(title="4 runs in /tmp/results")
    t.add_column("run", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("workload", no_wrap=True)
    for label in ("ranks", "samples/s", "step ms", "scaling"):
        t.add_column(label, justify="right", no_wrap=True)
    for r in ROWS:
        t.add_row(*r)
    t.caption = "samples/s, step ms: medians over measured steps\n⚠ 1 run(s) not steady enough to compare"
    return t


def printed(renderable, width: int, colour: bool) -> str:
    c = Console(file=io.StringIO(), width=width, color_system="truecolor" if colour else None, force_terminal=colour)
    c.print(renderable)
    return c.file.getvalue()


@pytest.mark.parametrize("width", [220, 80, 40])
@pytest.mark.parametrize("colour", [False, True])
def test_prints_what_rich_prints(width, colour):
    t = table()
    ours = printed(t, width, colour)
    assert ours == printed(t.to_rich(), width, colour)
    lines = printed(t, width, False).splitlines()
    if width == 220:  # fits: every row on its line, the caption's two lines centred under the table
        assert lines[1].startswith("┏━━━━━━━━┳") and lines[3].startswith("┡")
        assert lines[6] == "│ ws2-r1 │ ok ⚠   │ resnet50 │     2 │      2301 │     7.0 │   92.1% │"
        assert len(lines) == 1 + 3 + len(ROWS) + 1 + 2
    if colour and width == 220:
        assert "\x1b[31mfailed\x1b[0m" in ours and "\x1b[1mrun   \x1b[0m" in ours  # red failed, bold header


def test_a_table_without_columns_prints_like_rich():
    t = FastTable(title="nothing")
    assert printed(t, 80, False) == printed(t.to_rich(), 80, False)
