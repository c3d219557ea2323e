"""How a recording's binaries and their debug files are found (:func:`binary_finder`),
apart from :mod:`.perf`: a first run's symbols helper (forked before this process has
imported the unwinder) finds the files as the unwinder does without importing it, which
cost the helper ~5 ms of the Lua fixture's first run."""

from __future__ import annotations

from ..elf.debuginfo import DebugFiles
from ..unwind.modules import BinaryFinder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..errors import Problems
    from ..sources.perf_data import PerfData
    from ..unwind.provider import TableProvider


def recorded_build_ids(data: PerfData) -> dict[str, bytes]:
    """The build-id table of the recording's header (``perf buildid-list``) by file."""
    return {entry.filename: entry.build_id for entry in data.build_ids()}


def binary_finder(build_ids: dict[str, bytes], binaries: Iterable[str] = (),
                  problems: Problems | None = None, tables: TableProvider | None = None
                  ) -> tuple[BinaryFinder, DebugFiles]:
    """The finder of a recording's binaries (those of its build-id table, the user's
    directories ``binaries`` first), and where their separate debug files are found (the
    same directories first), as :class:`~.perf.PerfUnwinder` finds them. Tables generated
    and cached by default (``tables``: the command's provider)."""
    if tables is None:
        from .tables import GeneratedTables

        tables = GeneratedTables(True)
    binaries = list(binaries)
    return (BinaryFinder(binaries, build_ids, problems=problems, tables=tables),
            DebugFiles.from_environment(binaries))
