"""A first run's symbol tables made in a helper process while this one reads on.

``script`` splits a recording of a thousand samples or more between ``-j`` processes
after reading, in the process they fork from, the symbol tables of every binary its
samples hit (:func:`pysframe.cli.script._read_before_fork`): on a first run that is the
one long step before the fork (the Lua fixture: libc's 8,113 debug symbols, ~14 ms of a
~24 ms read). So, as :func:`.kernel.prefetch` does for kallsyms, a child makes the
tables that are not in the private cache and keeps them there while this process goes
on; this process then waits for the child and takes the tables it hands over on a file
only the two have (:meth:`SymbolsHelper.tables`: not read back from the cache, where
every entry is checked as hostile input). Nothing is forked on a warm run (each binary's
entry is there), on one CPU, while the kallsyms child runs, or when the cache cannot be
written.

The child is forked as soon as the recording's build-id table is read, before this
process has imported what follows it to the first sample (~10 ms sooner than when it
was forked from the ready unwinder), and makes its own finder: so it has the time to
make every table, the smaller ones too, while this process makes the indexes. The Lua
fixture's first run (-j 2): 127 ms against 129 with the child forked later and making
libc's alone while this process made the others (medians of 41 alternating first runs,
1.9% run by run); forked early but making libc's alone, it gained nothing (0.3%).
"""

from __future__ import annotations

import atexit
import os
import struct

from ..cachedir import entry_path, open_directory
from ..claims import MOST, Claims
from ..cpus import usable_cpus
from ..errors import Problems, PysframeError
from ..fd_io import write_all
from ..helper_child import HelperChild, start_helper
from ..made_exchange import unnamed_file
from .kernel import prefetching
from .symbols import SymbolTable, load_symbols, symbols_cache_kinds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol

    from ..elf import ElfImage
    from ..elf.debuginfo import DebugFiles

    class Finder(Protocol):
        def image(self, path: str, build_id: bytes | None) -> ElfImage | None: ...


#: A table handed over (:func:`_hand_over`): the file's number, the size of the path of
#: the file it was made of, of the entry.
_HANDED = struct.Struct("=IIQ")


class SymbolsHelper:
    """The child making the tables of ``files``, and the files neither it nor this process
    has claimed yet (:class:`~pysframe.claims.Claims`). ``handed``: a file only the two
    processes have, where the child also writes each table it made (:meth:`tables`)."""

    def __init__(self, child: HelperChild, files: list[tuple[str, bytes]],
                 claims: Claims, handed: int) -> None:
        self.child, self.files, self.claims, self.handed = child, files, claims, handed

    def wait(self) -> None:
        """Wait for the child's end."""
        self.child.wait()
        self.claims.close()

    def tables(self) -> dict[int, tuple[str, SymbolTable]]:
        """The tables the child made and handed over, by file number, with the path of the
        file each was made of, once it has ended with its work done (none otherwise).
        They are this run's own: not read back from the cache, where each is checked as
        hostile input (libc's: its debug file opened and its table's shape checked, ~1 ms
        before the workers' fork)."""
        handed, self.handed = self.handed, -1
        if handed < 0:
            return {}
        try:
            if not self.child.wait():
                return {}
            os.lseek(handed, 0, os.SEEK_SET)
            pieces = []
            while piece := os.read(handed, 1 << 20):
                pieces.append(piece)
        finally:
            os.close(handed)
        data = memoryview(b"".join(pieces))
        tables: dict[int, tuple[str, SymbolTable]] = {}
        offset = 0
        while offset + _HANDED.size <= len(data):
            number, path_size, size = _HANDED.unpack_from(data, offset)
            offset += _HANDED.size + path_size
            if offset + size > len(data) or number >= len(self.files):
                return {}  # (cannot be, short of a bug: this run's own child wrote them)
            path = bytes(data[offset - path_size:offset]).decode("utf-8", "surrogateescape")
            table = SymbolTable.from_entry(data[offset:offset + size], empty_ok=True)
            if table is None:
                return {}
            tables[number] = (path, table)
            offset += size
        return tables

    def close(self) -> None:
        """Let go of the tables handed over (none taken)."""
        if self.handed >= 0:
            os.close(self.handed)
            self.handed = -1


def uncached(files: Sequence[tuple[str, bytes | None]]) -> list[tuple[str, bytes]]:
    """The files (path, build id) whose symbol table has no cache entry (of either kind:
    from a separate debug file or not); files without a build id are never cached."""
    kinds = symbols_cache_kinds()
    return [(path, build_id) for path, build_id in files if build_id and not any(
        (found := entry_path(kind, build_id)) is not None and os.path.exists(found)
        for kind in kinds)]


#: The most files a child is given (:data:`pysframe.claims.MOST`: a recording naming more
#: leaves the rest to this process).
MAX_CLAIMS = MOST
#: The child :func:`prefetch_symbols` started, until :func:`take_started` takes it.
_started: SymbolsHelper | None = None
#: Whether the exit handler that ends a child no one took is registered.
_handled = False


def prefetch_symbols(files: Sequence[tuple[str, bytes | None]],
                     tools: Callable[[], tuple[Finder, DebugFiles]]) -> SymbolsHelper | None:
    """A child making the symbol tables of ``files`` that are not cached (found as the
    finder that ``tools`` makes in it finds them, their debug files through the
    ``DebugFiles`` it makes), or None when none is needed or possible; kept for
    :func:`take_started`. A child no one takes is stopped and reaped at exit: no process
    outlives the command. It forks: call it before any thread is started."""
    global _started, _handled
    _unclaimed_ended()  # (one started for an earlier run of this process, never taken)
    missing = uncached(files)
    if not missing or usable_cpus() < 2 or prefetching() or not _writable():
        return None
    missing = _largest_first(missing)[:MAX_CLAIMS]
    claims = Claims(len(missing))
    handed = unnamed_file()
    # The tables are kept in the cache once all are handed over and the child has said
    # so (this process goes on then): libc's entry took the child ~1.2 ms to keep, while
    # this process made the table it would have taken next, at ~4 times the child's cost.
    kept_later: list[Callable[[], None]] = []

    def make() -> bool:
        finder, debug = tools()
        while (number := claims.next()) is not None:
            path, build_id = missing[number]
            made = _make(finder, path, build_id, debug, kept_later)
            if made is not None:
                _hand_over(handed, number, *made)
        return True

    def keep() -> None:
        for kept in kept_later:
            kept()

    child = start_helper(make, keep)
    if child is None:
        claims.close()
        os.close(handed)
        return None
    if not _handled:
        atexit.register(_unclaimed_ended)
        _handled = True
    _started = SymbolsHelper(child, missing, claims, handed)
    return _started


def _largest_first(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``files`` by the size of the file at the path, largest first (the child starts on
    those; this process, when it comes to claim some, takes the smaller ones left)."""
    def size(file: tuple[str, bytes]) -> int:
        try:
            return os.stat(file[0]).st_size
        except OSError:
            return 0

    return sorted(files, key=size, reverse=True)


def started() -> SymbolsHelper | None:
    """The child :func:`prefetch_symbols` started, if not taken yet (it stays so)."""
    return _started


def take_started() -> SymbolsHelper | None:
    """The child :func:`prefetch_symbols` started, once (None: none, or taken before)."""
    global _started
    helper, _started = _started, None
    return helper


def _unclaimed_ended() -> None:
    """At exit (or before another is started): a child no one took (the run ended first,
    or went another way) is asked to end and reaped."""
    helper = take_started()
    if helper is not None:
        helper.claims.close()
        helper.child.stop()
        helper.wait()
        helper.close()


def _writable() -> bool:
    """Whether the tables' directory in the cache can be used (else what the child made
    would be lost, and made again here)."""
    directory = open_directory("symbols", create=True)
    if directory is None:
        return False
    os.close(directory)
    return True


def _make(finder: Finder, path: str, build_id: bytes, debug: DebugFiles,
          kept_later: list[Callable[[], None]]) -> tuple[str, SymbolTable] | None:
    """The table of one file made (kept in the cache by what it appends to
    ``kept_later``), and the path of the file it was made of; None for a file that cannot
    be read or whose table has a fault (a malformed PLT relocation table: such a table is
    not kept), left to this process, which reports it as it makes it again."""
    try:
        image = finder.image(path, build_id)
        if image is not None:
            faults = Problems()
            table = load_symbols(image, problems=faults, debug=debug, kept_later=kept_later)
            return (image.path, table) if not faults else None
    except (PysframeError, OSError):
        pass
    return None


def _hand_over(handed: int, number: int, path: str, table: SymbolTable) -> None:
    """Write the table of file ``number`` (made of the file at ``path``) where the process
    that forked this one reads it (:meth:`SymbolsHelper.tables`)."""
    entry = table.entry()
    named = path.encode("utf-8", "surrogateescape")
    write_all(handed, _HANDED.pack(number, len(named), len(entry)) + named + entry)
