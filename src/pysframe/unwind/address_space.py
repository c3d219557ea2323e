"""The data model of a process's code: modules, their mappings, the address space.

Later stages (``symbolize``, ``report``) read frames through these types only;
loading binaries and their SFrame tables is :mod:`.modules`' job.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the model neither opens files nor decodes tables
    from ..elf import ElfImage
    from ..format.lookup import FrameRow, SFrameLookup


@dataclass(slots=True)
class Module:
    """One ELF file as mapped: ``bias`` = runtime address - link-time address."""

    path: str
    build_id: bytes | None
    bias: int
    lookup: SFrameLookup | None
    origin: str  # ".sframe", "generated", or why there is no table
    image: ElfImage | None = None

    def find_fre(self, pc: int) -> FrameRow | None:
        if self.lookup is None:
            return None
        return self.lookup.find_fre(pc - self.bias)


@dataclass(slots=True)
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


@dataclass(slots=True)
class AddressSpace:
    """The executable mappings of one process, sorted by start address."""

    mappings: list[Mapping] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)
    #: Bumped at every change, so caches keyed by it never see a stale layout.
    version: int = 0

    def add(self, mapping: Mapping) -> None:
        # A new mapping replaces whatever it overlaps (exec, dlclose + dlopen ...).
        kept = [m for m in self.mappings if m.end <= mapping.start or m.start >= mapping.end]
        kept.append(mapping)
        kept.sort(key=lambda m: m.start)
        self.mappings = kept
        self._starts = [m.start for m in kept]
        self.version += 1

    def find(self, address: int) -> Mapping | None:
        index = bisect_right(self._starts, address) - 1
        if index >= 0 and address < self.mappings[index].end:
            return self.mappings[index]
        return None

    def copy(self) -> AddressSpace:
        return AddressSpace(list(self.mappings), list(self._starts), self.version)
