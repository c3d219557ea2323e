"""Progress bars on stderr (rich): the stages below ``cli`` draw nothing and take a bar
through a small protocol (``session.tables.ProgressBar``)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)
if TYPE_CHECKING:
    from typing import Any


class TableBar:
    """``generating SFrame tables`` with a count and the binary just done; removed when
    stopped. Made by :meth:`start` (the ``progress_bar`` of
    :class:`~pysframe.session.tables.GeneratedTables`)."""

    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task

    @classmethod
    def start(cls, total: int) -> TableBar:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(TextColumn("generating SFrame tables"), BarColumn(),
                       MofNCompleteColumn(), TextColumn("{task.description}"),
                       console=Console(file=sys.stderr), transient=True)
        task = bar.add_task("", total=total)
        bar.start()
        return cls(bar, task)

    def advance(self, name: str) -> None:
        self.bar.update(self.task, advance=1, description=os.path.basename(name))

    def stop(self) -> None:
        self.bar.stop()
