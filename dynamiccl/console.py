"""The one place tables are given a width: a terminal's own, and outside a terminal the whole table.

rich squeezes a table to 80 columns when stdout is a pipe or a file, cutting every header to
"cal…", "ncc…"; a pipe or a file has no edge, so there every table is printed at its natural width.
"""

from __future__ import annotations

from typing import Any

#: Columns a console gets outside a terminal: wider than any table, so none is squeezed (tables
#: keep their natural width; they are not stretched to the console).
UNBOUNDED_WIDTH = 10_000


def console(*, width: int | None = None, stderr: bool = False, **kwargs: Any) -> Any:
    """A rich Console for tables: ``width`` if given, else the terminal's width, else (piped or
    redirected) wide enough for any table."""
    from rich.console import Console

    if width is None:
        probe = Console(stderr=stderr, **kwargs)
        if probe.is_terminal:
            return probe
        width = UNBOUNDED_WIDTH
    return Console(width=width, stderr=stderr, **kwargs)
