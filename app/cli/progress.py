"""A progress bar on stderr for long CLI runs (``simulate`` of thousands of pods), drawn by rich.

Only on a terminal: piped or captured stderr (CI logs, ``2> file``, the tests) gets nothing, so that the
output of scripts stays what it was.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(total: int, description: str, stream: TextIO | None = None) -> Iterator[Callable[[], None]]:
    """A function advancing a bar of ``total`` steps on ``stream`` (stderr); a no-op off a terminal."""
    stream = stream or sys.stderr
    if not stream.isatty() or total == 0:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda: progress.advance(task)
