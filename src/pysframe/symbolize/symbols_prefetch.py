"""A first run's symbol tables made in a helper process while this one reads on.

``script`` splits a recording of a thousand samples or more between ``-j`` processes
after reading, in the process they fork from, the symbol tables of every binary its
samples hit (:func:`pysframe.cli.script._read_before_fork`): on a first run that is the
one long step before the fork, with the second CPU idle (the Lua fixture: libc's 8,113
debug symbols, ~14 ms of a ~24 ms read). So, as :func:`.kernel.prefetch` does for
kallsyms, a child makes the larger tables that are not in the private cache and keeps
them there while this process follows the recording to its first sample (and checks the
binaries' own tables) and then makes the smaller ones; this process then waits for the
child and reads its tables back from the cache, as a warm run does. Nothing is forked on
a warm run (each binary's entry is there), on one CPU, while the kallsyms child runs, or
when the cache cannot be written.

The Lua fixture's first run (-j 2): the workers were forked ~4 ms sooner with the child
making every table (this process waited 7-9 ms for it: a fork costs both processes copies
of the pages they write), ~8 ms sooner with it making libc's alone and this process the
others meanwhile: 125 ms against 135 (15 alternating first runs).
"""

from __future__ import annotations

import os

from ..cachedir import entry_path, open_directory
from ..cpus import usable_cpus
from ..errors import PysframeError
from ..helper_child import HelperChild, start_helper
from .kernel import prefetching
from .symbols import load_symbols, symbols_cache_kinds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from ..elf import ElfImage
    from ..elf.debuginfo import DebugFiles

    class Finder(Protocol):
        def image(self, path: str, build_id: bytes | None) -> ElfImage | None: ...


#: The child's share of the tables to make, in bytes of their files: this process starts
#: on its own share later (once at the first sample).
CHILD_SHARE = 2 / 3


class SymbolsHelper:
    """The child making the tables of ``files``."""

    def __init__(self, child: HelperChild, files: list[tuple[str, bytes]]) -> None:
        self.child, self.files = child, files

    def wait(self) -> None:
        """Wait for the child's end."""
        self.child.wait()


def uncached(files: Sequence[tuple[str, bytes | None]]) -> list[tuple[str, bytes]]:
    """The files (path, build id) whose symbol table has no cache entry (of either kind:
    from a separate debug file or not); files without a build id are never cached."""
    kinds = symbols_cache_kinds()
    return [(path, build_id) for path, build_id in files if build_id and not any(
        (found := entry_path(kind, build_id)) is not None and os.path.exists(found)
        for kind in kinds)]


def prefetch_symbols(files: Sequence[tuple[str, bytes | None]], finder: Finder,
                     debug: DebugFiles) -> SymbolsHelper | None:
    """A child making the larger symbol tables of ``files`` that are not cached (see
    :func:`child_share`; found as ``finder`` finds them, their debug files through
    ``debug``), or None when none is needed or possible. It forks: call it before any
    thread is started."""
    missing = child_share(uncached(files))
    if not missing or usable_cpus() < 2 or prefetching() or not _writable():
        return None

    def make() -> bool:
        for path, build_id in missing:
            _make(finder, path, build_id, debug)
        return True

    child = start_helper(make)
    return SymbolsHelper(child, missing) if child is not None else None


def child_share(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The largest of ``files`` (by the size of the file at the path), up to
    :data:`CHILD_SHARE` of their bytes, at least one."""
    sizes: dict[tuple[str, bytes], int] = {}
    for path, build_id in files:
        try:
            sizes[(path, build_id)] = os.stat(path).st_size
        except OSError:
            sizes[(path, build_id)] = 0
    total, taken = sum(sizes.values()), 0
    share: list[tuple[str, bytes]] = []
    for file in sorted(files, key=sizes.__getitem__, reverse=True):
        if share and taken >= CHILD_SHARE * total:
            break
        share.append(file)
        taken += sizes[file]
    return share


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
