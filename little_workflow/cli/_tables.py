"""Tables on stdout, one way for every listing command.

A terminal gets its own width, with names and paths folding when it is narrow; a pipe gets
whole rows (for grep and cut). Ids, times and numbers are never cut or wrapped: they are
what a person copies into the next command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["print_table", "stdout_console"]

_PIPE_WIDTH = 4096
#: Columns copied whole.
_WHOLE = frozenset(
    {"id", "run", "size", "created", "updated", "started", "duration", "events", "steps done"}
)
_RIGHT = frozenset({"size", "events", "steps done", "keys", "cycle"})
#: Colours of a status cell.
STATUS_STYLES = {
    "completed": "green",
    "failed": "red",
    "running": "yellow",
    "cancelled": "dim",
    "interrupted": "magenta",
}


def stdout_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): the terminal's width, or whole lines on a pipe
    or in a file (rich would fold them at 80 columns, mid-sentence)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(highlight=False, stderr=stderr)
    return Console(highlight=False, stderr=stderr, width=_PIPE_WIDTH)


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    empty: str,
    *,
    console: Console | None = None,
) -> None:
    """Print ``rows`` under ``columns`` (cells are plain text; a ``status`` cell is coloured)."""
    from rich.markup import escape
    from rich.table import Table

    console = console or stdout_console()
    if not rows:
        console.print(empty, markup=False)
        return
    table = Table(box=None, header_style="bold")
    for column in columns:
        whole = column in _WHOLE
        table.add_column(
            column,
            justify="right" if column in _RIGHT else "left",
            no_wrap=whole,
            overflow="ellipsis" if whole else "fold",
        )
    status_at = columns.index("status") if "status" in columns else -1
    for row in rows:
        cells = [escape(cell) for cell in row]
        if 0 <= status_at < len(row):
            style = STATUS_STYLES.get(row[status_at], "white")
            cells[status_at] = f"[{style}]{cells[status_at]}[/]"
        table.add_row(*cells)
    console.print(table)
