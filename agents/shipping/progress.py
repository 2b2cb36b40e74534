"""Progress bars for long work: scoring policies, exporting one, training the full-information learner.

A bar is drawn with rich on stderr when stderr is a terminal, and nothing at all is written when it
is piped or redirected, so logs, tables and ``--json`` output stay clean. The bar is transient: it
disappears when the work is done and leaves the screen to the results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: ``advance(n)``: n more units of the work are done.
Advance = Callable[[int], None]


def _nothing(n: int = 1) -> None:
    """Where no bar is drawn, progress is not recorded anywhere."""


@contextmanager
def progress_bar(description: str, total: int, *, console: Any = None) -> Iterator[Advance]:
    """Yields ``advance``; ``console`` (a rich Console) defaults to one on stderr."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _nothing
        return
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance
