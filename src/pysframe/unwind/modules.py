"""Loading the modules of an address space: mapped ELF files, their load bias and their
SFrame table (the data model itself is in :mod:`.address_space`).

Binaries are found by build id, in perf's order: in its build-id cache (``~/.debug``),
at the recorded path, or in directories the user names (searched recursively). A
file whose build id differs is never used.

On a first run most binaries have no table in the cache yet: :meth:`BinaryFinder.prefetch`
generates the missing ones in parallel (a process pool; generation is pure Python and
CPU-bound, so threads would not help) before the samples are unwound.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..cfi.errors import CFIError
from ..elf import ElfError, ElfImage
from ..elf.headers import PT_LOAD
from ..errors import Problems, PysframeError
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import SFrameLookup
from ..generate.cache import cached_table, sframe_for
from ..generate.errors import GenerateError
from .address_space import Module, TableGuard

if TYPE_CHECKING:
    from ..sources.perf_data import PerfData


class BinaryFinder:
    """Locates the file for a (path, build id): ~/.debug, recorded path, user directories."""

    def __init__(self, directories: Iterable[str] = (), build_ids: dict[str, bytes] | None = None,
                 use_cache: bool = True, problems: Problems | None = None,
                 report_unreadable: bool = True) -> None:
        self.directories = list(directories)
        self.build_ids = build_ids or {}
        self.use_cache = use_cache
        #: Where errors that cost one binary its frames are reported (None: silently).
        self.problems = problems
        #: Whether a recorded file that cannot be read is one of them (a caller that checks
        #: and reports the files itself, as ``sframe stack`` does, says no).
        self.report_unreadable = report_unreadable
        #: Binaries opened for their symbols only: no table read or generated (a recording
        #: without stack copies is never unwound here).
        self.symbols_only = False
        self._index: dict[str, list[str]] | None = None
        self._modules: dict[tuple[str, bytes | None], Module | None] = {}
        #: Images found, and tables read from the cache, by :meth:`prefetch` (used once).
        self._prepared: dict[tuple[str, bytes | None],
                             tuple[ElfImage, tuple[bytes, int] | None]] = {}

    def _candidates(self, path: str, build_id: bytes | None) -> Iterable[str]:
        # perf's order: its build-id cache first (perf record copies each binary there, so
        # a binary stripped since, with the same build id, is named from the copy), then
        # the recorded path.
        if build_id:
            yield os.path.join(os.path.expanduser("~/.debug"), ".build-id", build_id.hex()[:2],
                               build_id.hex()[2:] + "/elf")
        yield path
        if self._index is None:
            self._index = {}
            for directory in self.directories:
                for root, _, names in os.walk(directory):
                    for name in names:
                        self._index.setdefault(name, []).append(os.path.join(root, name))
        yield from self._index.get(os.path.basename(path), [])

    def image(self, path: str, build_id: bytes | None) -> ElfImage | None:
        """The file for ``path`` with ``build_id``: the first candidate that is a readable
        ELF file with that build id. A corrupt file at the recorded path is reported (its
        frames are lost); other candidates are only guesses by name and skipped quietly."""
        for candidate in self._candidates(path, build_id):
            if not os.path.isfile(candidate):
                continue
            try:
                image = ElfImage(candidate)
                if build_id is not None and image.build_id() != build_id:
                    continue
                return image
            except ElfError as error:
                if candidate == path and self.problems is not None and self.report_unreadable:
                    self.problems.add(error)
                continue
        return None

    def module(self, path: str, build_id: bytes | None, start: int, pgoff: int) -> Module | None:
        build_id = build_id or self.build_ids.get(path)
        key = (path, build_id)
        if key in self._modules:
            cached = self._modules[key]
            if cached is None:
                return None
            return _rebased(cached, self._bias(cached, start, pgoff))
        prepared = self._prepared.pop(key, None)
        image = prepared[0] if prepared is not None else self.image(path, build_id)
        if image is None:
            self._modules[key] = None
            return None
        lookup, origin, file_offset = self._table(image, prepared[1] if prepared else None)
        module = Module(image.path, build_id, 0, lookup, origin, image,
                        TableGuard(self.problems, file_offset))
        self._modules[key] = module
        return _rebased(module, self._bias(module, start, pgoff))

    def _table(self, image: ElfImage, table: tuple[bytes, int] | None = None
               ) -> tuple[SFrameLookup | None, str, int | None]:
        """The SFrame lookup to unwind ``image`` with (``table``: already read from the
        cache), its origin, and the file offset of the table when it is the file's own
        section. A binary without CFI simply has no table; a malformed one is reported as
        a problem."""
        if self.symbols_only:
            return None, "no SFrame: not needed (nothing to unwind)", None
        try:
            data, address = table or sframe_for(image, use_cache=self.use_cache)
            reader = SFrameReader(data, address)
            own = image.sframe_sections()
        except GenerateError as error:
            return None, f"no SFrame: {error}", None
        except (ElfError, SFrameError, CFIError) as error:
            if self.problems is not None:
                self.problems.add(error, image.path)
            return None, f"no SFrame: {error}", None
        file_offset = next((s.file_offset for s in own if s.address == address and s.raw == data), None)
        return SFrameLookup(reader), ".sframe" if own else "generated", file_offset

    def prefetch(self, files: Iterable[tuple[str, bytes | None]], *, progress: bool = False,
                 workers: int | None = None) -> int:
        """Find the binaries of ``files`` (path, build id) and the tables the cache has for
        them; when more than one is missing, generate those in parallel (this process makes
        the largest, a pool of ``workers`` - 1 processes the others; default: one per CPU)
        and put them into the cache, with a progress bar on stderr if ``progress``.
        Returns how many were generated.

        Only a warm-up: a file that cannot be read or a table that cannot be made is
        left to :meth:`module`, which reports it as it would have without this."""
        if not self.use_cache or self.symbols_only:
            return 0
        missing: list[tuple[str, bytes | None]] = []
        for path, build_id in files:
            build_id = build_id or self.build_ids.get(path)
            key = (path, build_id)
            if key in self._modules or key in self._prepared:
                continue
            image = self._quiet_image(path, build_id)
            if image is None:
                continue
            try:
                table = cached_table(image)
            except PysframeError:
                table = None
            self._prepared[key] = (image, None if table is None else (table, 0))
            if table is None and image.build_id():
                missing.append(key)
        processes = workers or os.cpu_count() or 1
        if len(missing) < 2 or processes < 2:
            return 0  # nothing to overlap: each table is made where it is needed
        # Largest first: the longest job starts at once instead of last on a busy worker.
        missing.sort(key=lambda key: len(self._prepared[key][0].data), reverse=True)
        here = self._prepared[missing[0]][0].path
        others = list(dict.fromkeys(self._prepared[key][0].path for key in missing[1:]))
        _generate_all([path for path in others if path != here], progress, processes - 1,
                      lambda: self._generate_here(missing[0]))
        return len(missing)

    def _generate_here(self, key: tuple[str, bytes | None]) -> str:
        """Generate (and cache) the table of a prepared binary in this process."""
        image = self._prepared[key][0]
        try:
            self._prepared[key] = (image, sframe_for(image))
        except PysframeError:
            pass  # module() tries again and reports it
        return image.path

    def _quiet_image(self, path: str, build_id: bytes | None) -> ElfImage | None:
        """:meth:`image` without reporting an unreadable file (:meth:`module` does, for
        the files the samples need)."""
        report, self.report_unreadable = self.report_unreadable, False
        try:
            return self.image(path, build_id)
        finally:
            self.report_unreadable = report

    @staticmethod
    def _bias(module: Module, start: int, pgoff: int) -> int:
        image = module.image
        if image is None:
            return start - pgoff
        loads = [segment for segment in image.program_headers() if segment.type == PT_LOAD]
        # A segment whose mapping starts at pgoff first: with lld's packed layout the
        # read-only segment before the code also covers the code's first file page.
        for exact in (True, False):
            for segment in loads:
                offset = segment.offset & ~0xFFF
                if (pgoff == offset if exact
                        else offset <= pgoff < segment.offset + max(segment.filesz, 1)):
                    return int(start - ((segment.vaddr & ~0xFFF) + (pgoff - offset)))
        return start - pgoff


def _rebased(module: Module, bias: int) -> Module:
    if module.bias == bias:
        return module
    return Module(module.path, module.build_id, bias, module.lookup, module.origin, module.image,
                  module.guard)


#: How far into a recording's records :func:`recorded_files` looks for mappings: the
#: binaries of the processes that exist at the start, and those the recorded command
#: loads first, are mapped there; a later one gets its table when it is mapped.
SCAN_LIMIT = 64 << 20


def recorded_files(data: PerfData) -> list[tuple[str, bytes | None]]:
    """(path, build id) of the user-space ELF files a recording maps or has build ids
    for (the start of the records only, see :data:`SCAN_LIMIT`)."""
    from ..sources.perf_records import RECORD_MMAP, RECORD_MMAP2, Mmap

    found: dict[str, bytes | None] = {
        entry.filename: entry.build_id for entry in data.build_ids() if not entry.kernel}
    end = data.data_offset + SCAN_LIMIT
    for record in data.records(frozenset((RECORD_MMAP, RECORD_MMAP2)), until=end):
        if isinstance(record, Mmap) and record.executable:
            found.setdefault(record.filename, record.build_id)
    return [(name, build_id) for name, build_id in found.items()
            if name.startswith("/") and not name.endswith(".ko")]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _make_table(path: str) -> str:
    """In a worker process: generate and cache the table of the ELF file ``path``."""
    try:
        sframe_for(ElfImage(path))
    except PysframeError:
        pass  # reported by the main process, which tries again
    return path


def _generate_all(paths: list[str], progress: bool, workers: int,
                  here: Callable[[], str]) -> None:
    """Run :func:`_make_table` for ``paths`` in a pool of at most ``workers`` processes
    while this process runs ``here``, showing a progress bar."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    bar, advance = _progress_bar(len(paths) + 1) if progress else (None, None)
    try:
        with ProcessPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
            futures = [pool.submit(_make_table, path) for path in paths]
            name = here()
            if advance is not None:
                advance(name)
            for done in as_completed(futures):
                try:
                    name = done.result()
                except Exception:  # a worker's bug: the main process does it again
                    name = ""
                if advance is not None:
                    advance(name)
    finally:
        if bar is not None:
            bar.stop()


def _progress_bar(total: int) -> tuple[Any, Callable[[str], None]]:
    """A started rich progress bar on stderr (removed when stopped), and its step."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(TextColumn("generating SFrame tables"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.description}"), console=Console(file=sys.stderr),
                   transient=True)
    task = bar.add_task("", total=total)

    def advance(name: str) -> None:
        bar.update(task, advance=1, description=os.path.basename(name))

    bar.start()
    return bar, advance
