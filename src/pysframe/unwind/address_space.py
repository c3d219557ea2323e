"""The data model of a process's code: modules, their mappings, the address space.

Later stages (``symbolize``, ``report``) read frames through these types only;
loading binaries and their SFrame tables is :mod:`.modules`' job.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import count
from typing import TYPE_CHECKING

from ..errors import Problems, PysframeError
from ..format.errors import SFrameError
from ..records import field, record_class, replace

if TYPE_CHECKING:  # types only: the model neither opens files nor decodes tables
    from ..elf import ElfImage
    from ..format.lookup import FrameRow, SFrameLookup


class TableGuard:
    """Whether a module's SFrame table is still trusted. The first lookup that finds the
    table corrupt drops it for good, for every mapping of the module (the kernel's rule: a
    faulting table is removed, never trusted again); the fault is reported once through
    ``problems``, with the file offset when the table is the file's own section."""

    __slots__ = ("fault", "file_offset", "problems")

    def __init__(self, problems: Problems | None = None, file_offset: int | None = None) -> None:
        self.problems = problems
        #: Where the table lies in the file (None: generated, in no file).
        self.file_offset = file_offset
        self.fault: SFrameError | None = None

    def drop(self, error: SFrameError, path: str) -> None:
        self.fault = error
        if self.problems is None:
            return
        where = ""
        if error.offset is not None and self.file_offset is not None:
            where = f" at file offset {self.file_offset + error.offset:#x}"
        elif error.offset is not None:
            where = f" at offset {error.offset:#x} of its generated table"
        self.problems.add(PysframeError(f"SFrame table dropped, frames there fall back to the "
                                        f"frame pointer: {error.message}{where}", path=path))


@record_class
class Module:
    """One ELF file as mapped: ``bias`` = runtime address - link-time address."""

    path: str
    build_id: bytes | None
    bias: int
    lookup: SFrameLookup | None
    origin: str  # ".sframe", "generated", or why there is no table
    image: ElfImage | None = None
    guard: TableGuard = field(default_factory=TableGuard)

    def find_fre(self, pc: int) -> FrameRow | None:
        """The SFrame row for the runtime ``pc``, or None (no table, no row, or a table
        found corrupt: dropped)."""
        lookup = self.lookup
        if lookup is None or self.guard.fault is not None:
            return None
        try:
            return lookup.find_fre(pc - self.bias)
        except SFrameError as error:
            self.guard.drop(error, self.path)
            return None


@record_class
class Mapping:
    """An executable mapping ``[start, end)`` of ``filename`` at file offset ``pgoff``."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: bytes | None
    module: Module | None = None

    def code(self, address: int, size: int) -> bytes | None:
        """``size`` bytes of the file as mapped at ``address`` (``None`` if not available)."""
        if self.module is None or self.module.image is None:
            return None
        offset = address - self.start + self.pgoff
        data = self.module.image.data
        if not 0 <= offset <= len(data) - size:
            return None
        return data[offset:offset + size]


_LAYOUTS = count(1)


@record_class
class AddressSpace:
    """The executable mappings of one process, sorted by start address."""

    mappings: list[Mapping] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)
    #: A new number at every change, unique in the process (a copy keeps it: same
    #: mappings), so caches keyed by it never see a stale or another space's layout.
    version: int = 0

    def add(self, mapping: Mapping) -> None:
        # A new mapping replaces what it overlaps (exec, dlclose + dlopen ...); the parts of
        # an older mapping outside it stay, as perf keeps them (perf inject --jit maps each
        # function's file over the start of the next one's).
        kept = []
        for m in self.mappings:
            if m.end <= mapping.start or m.start >= mapping.end:
                kept.append(m)
                continue
            if m.start < mapping.start:
                kept.append(replace(m, end=mapping.start))
            if m.end > mapping.end:
                kept.append(replace(m, start=mapping.end,
                                    pgoff=m.pgoff + (mapping.end - m.start)))
        kept.append(mapping)
        kept.sort(key=lambda m: m.start)
        self.mappings = kept
        self._starts = [m.start for m in kept]
        self.version = next(_LAYOUTS)

    def find(self, address: int) -> Mapping | None:
        index = bisect_right(self._starts, address) - 1
        if index >= 0 and address < self.mappings[index].end:
            return self.mappings[index]
        return None

    def copy(self) -> AddressSpace:
        return AddressSpace(list(self.mappings), list(self._starts), self.version)
