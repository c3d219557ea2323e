"""A first run's symbol tables made in a helper process while this one reads on.

``script`` splits a recording of a thousand samples or more between ``-j`` processes
after reading, in the process they fork from, the symbol tables of every binary its
samples hit (:func:`pysframe.cli.script._read_before_fork`): on a first run that is the
one long step before the fork (the Lua fixture: libc's 8,113 debug symbols, ~14 ms of a
~24 ms read). So, as :func:`.kernel.prefetch` does for kallsyms, a child makes the
tables that are not in the private cache and keeps them there while this process goes
on; this process then waits for the child and reads its tables back from the cache, as
a warm run does. Nothing is forked on a warm run (each binary's entry is there), on one
CPU, while the kallsyms child runs, or when the cache cannot be written.

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

from ..cachedir import entry_path, open_directory
from ..claims import MOST, Claims
from ..cpus import usable_cpus
from ..errors import PysframeError
from ..helper_child import HelperChild, start_helper
from .kernel import prefetching
from .symbols import load_symbols, symbols_cache_kinds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol

    from ..elf import ElfImage
    from ..elf.debuginfo import DebugFiles

    class Finder(Protocol):
        def image(self, path: str, build_id: bytes | None) -> ElfImage | None: ...


class SymbolsHelper:
    """The child making the tables of ``files``, and the files neither it nor this process
    has claimed yet (:class:`~pysframe.claims.Claims`)."""

    def __init__(self, child: HelperChild, files: list[tuple[str, bytes]],
                 claims: Claims) -> None:
        self.child, self.files, self.claims = child, files, claims

    def wait(self) -> None:
        """Wait for the child's end."""
        self.child.wait()
        self.claims.close()


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

    def make() -> bool:
        finder, debug = tools()
        while (number := claims.next()) is not None:
            path, build_id = missing[number]
            _make(finder, path, build_id, debug)
        return True

    child = start_helper(make)
    if child is None:
        claims.close()
        return None
    if not _handled:
        atexit.register(_unclaimed_ended)
        _handled = True
    _started = SymbolsHelper(child, missing, claims)
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


def _writable() -> bool:
    """Whether the tables' directory in the cache can be used (else what the child made
    would be lost, and made again here)."""
    directory = open_directory("symbols", create=True)
    if directory is None:
        return False
    os.close(directory)
    return True


def _make(finder: Finder, path: str, build_id: bytes, debug: DebugFiles) -> None:
    """The table of one file made and kept (a file that cannot be read is left to this
    process, which reports it as it reads it)."""
    try:
        image = finder.image(path, build_id)
        if image is not None:
            load_symbols(image, debug=debug)
    except (PysframeError, OSError):
        pass
