"""Progress bars for long CLI operations (``sepp enqueue`` of a file of jobs showed
nothing until the end): a rich bar on stderr with counts, percentage, rate and time left.

Shown when stderr is a terminal (``--progress`` forces it, ``--no-progress`` hides it); never
mixed into ``--json`` output, which goes to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """``12,345 jobs/s``: completed items per second of elapsed time (``unit`` names them)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        """The task's average rate so far (``–`` before a second has passed)."""
        elapsed = task.elapsed or 0.0
        if elapsed <= 0 or not task.completed:
            return Text(f"– {self.unit}/s", style="progress.data.speed")
        return Text(f"{task.completed / elapsed:,.0f} {self.unit}/s", style="progress.data.speed")


def wanted(flag: bool | None, as_json: bool = False) -> bool:
    """Whether to show a bar: ``flag`` when given (``--progress`` / ``--no-progress``), else
    only when stderr is a terminal and the output is not ``--json`` (whose error documents
    go to stderr: a script reading them should not meet a bar unless it asked for one)."""
    if flag is not None:
        return flag
    return not as_json and sys.stderr.isatty()


@contextmanager
def progress_bar(total: int, what: str, *, unit: str = "jobs", show: bool = True) -> Iterator[Callable[[int], None]]:
    """A bar for ``total`` items labelled ``what`` on stderr; yields ``advance(n)``. With
    ``show`` false it yields a no-op and prints nothing. The last state stays on screen when
    the block ends (a record of the run: counts, rate, time taken)."""
    if not show:
        yield lambda _n: None
        return
    console = Console(stderr=True, highlight=False, force_terminal=sys.stderr.isatty() or None)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               RateColumn(unit), TimeRemainingColumn())
    with Progress(*columns, console=console, redirect_stdout=False, redirect_stderr=False,
                  refresh_per_second=8) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)
