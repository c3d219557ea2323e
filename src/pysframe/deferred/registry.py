"""The per-process SFrame registry of the kernel's deferred unwinder.

As the kernel series "unwind_deferred: Implement sframe handling" (v13) describes it: a
section is added with its table and text ranges (``sframe_add_section``), when the ELF
loader maps a file with ``PT_GNU_SFRAME`` or when a program registers one itself (the
proposed ``sframe_register`` call and its ``prctl`` variant, for JIT code); it is
refused unless both ranges are mapped (the text executable), its header is one the
kernel reads (version 3, sorted FDEs, PC-relative function starts, no auxiliary
header, FDEs and FREs present, sub-sections inside the section) and its text does not
overlap a registered one. With ``validation`` (``CONFIG_SFRAME_VALIDATION``) the whole
table is checked at registration by the same rules as ``sframe validate --kernel``.
Sections are looked up by text address; a section that faults or is found corrupt
while unwinding is removed, and unmapping its text or its table drops it.
"""

from __future__ import annotations

import errno
import struct
from bisect import bisect_right
from typing import Protocol

from ..format.constants import F_FDE_FUNC_START_PCREL, F_FDE_SORTED, VERSION_3
from ..format.decode import SFrameReader
from ..format.errors import SFrameError
from ..format.lookup import FrameRow, SFrameLookup
from ..records import record_class


class Area(Protocol):
    """A mapped area, as registration checks it."""

    @property
    def end(self) -> int: ...

    @property
    def executable(self) -> bool: ...


class ProcessMemory(Protocol):
    """What the registry reads of its process (:class:`~.mm.Mm` provides it)."""

    def vma_at(self, address: int) -> Area | None: ...

    def read_bytes(self, address: int, size: int) -> bytes | None: ...


@record_class
class SFrameSection:
    """One registered section: its table ``[sframe_start, sframe_end)`` describes the
    code ``[text_start, text_end)``."""

    sframe_start: int
    sframe_end: int
    text_start: int
    text_end: int
    name: str = ""
    #: Built on first lookup from the table's bytes in the process (dropped when they
    #: are written).
    lookup: SFrameLookup | None = None


@record_class
class Removal:
    """A section the registry dropped, and why (``unmapped``, ``unregistered``, ``fault``,
    ``corrupt``)."""

    section: SFrameSection
    reason: str


@record_class
class SFrameRegistration:
    """The argument of the proposed ``sframe_register`` / ``sframe_unregister`` call."""

    sframe_start: int
    sframe_size: int
    text_start: int
    text_size: int


#: The prctl variant's options (by name: their numbers are not settled upstream).
PR_ADD_SFRAME, PR_REMOVE_SFRAME = "PR_ADD_SFRAME", "PR_REMOVE_SFRAME"
_ADDRESS_LIMIT = 1 << 64


class SFrameRegistry:
    """The sections of one process by text range (the kernel keeps a maple tree)."""

    def __init__(self, mm: ProcessMemory, validation: bool = False) -> None:
        self.mm = mm
        self.validation = validation
        self._sections: list[SFrameSection] = []
        self._starts: list[int] = []
        #: Every removal, in order (what a kernel's debug messages would say).
        self.removals: list[Removal] = []

    def __len__(self) -> int:
        return len(self._sections)

    @property
    def sections(self) -> tuple[SFrameSection, ...]:
        return tuple(self._sections)

    # -- adding and removing -------------------------------------------------------

    def add(self, sframe_start: int, sframe_end: int, text_start: int, text_end: int,
            name: str = "") -> int:
        """``sframe_add_section``: 0, or a negative errno (nothing is added)."""
        if not (sframe_start and sframe_end and text_start and text_end):
            return -errno.EINVAL
        if sframe_end <= sframe_start or text_end <= text_start:
            return -errno.EINVAL
        table_area = self.mm.vma_at(sframe_start)
        if table_area is None or sframe_end > table_area.end:
            return -errno.EINVAL
        text_area = self.mm.vma_at(text_start)
        if text_area is None or not text_area.executable or text_end > text_area.end:
            return -errno.EINVAL
        section = SFrameSection(sframe_start, sframe_end, text_start, text_end, name)
        refused = self._refusal(section)
        if refused:
            return refused
        index = bisect_right(self._starts, text_start)
        before = self._sections[index - 1] if index else None
        after = self._sections[index] if index < len(self._sections) else None
        if (before is not None and before.text_end > text_start) or (
                after is not None and after.text_start < text_end):
            return -errno.EEXIST
        self._sections.insert(index, section)
        self._starts.insert(index, text_start)
        return 0

    def remove(self, sframe_start: int) -> int:
        """``sframe_remove_section``: every section with that table address; -EINVAL if
        there is none."""
        found = [section for section in self._sections if section.sframe_start == sframe_start]
        if not found:
            return -errno.EINVAL
        for section in found:
            self._drop(section, "unregistered")
        return 0

    def unmapped(self, start: int, end: int) -> None:
        """``[start, end)`` was unmapped: drop the sections whose text or table it cut."""
        for section in list(self._sections):
            if (section.text_start < end and start < section.text_end) or (
                    section.sframe_start < end and start < section.sframe_end):
                self._drop(section, "unmapped")

    def written(self, start: int, end: int) -> None:
        """Bytes in ``[start, end)`` changed: tables there are read again at next use."""
        for section in self._sections:
            if section.sframe_start < end and start < section.sframe_end:
                section.lookup = None

    def inherit(self, parent: SFrameRegistry) -> None:
        """Take the sections of ``parent``'s process, whose memory this one copies (a fork):
        each a section of its own (a write in one process drops only its own lookup), the
        lookups built so far shared (they were read from the same bytes)."""
        self._sections = [SFrameSection(section.sframe_start, section.sframe_end,
                                        section.text_start, section.text_end, section.name,
                                        section.lookup) for section in parent._sections]
        self._starts = list(parent._starts)
        # The parent's history too: a section it dropped is missing here for that reason.
        self.removals = list(parent.removals)

    def register(self, what: SFrameRegistration) -> int:
        """``sframe_register``: sizes that wrap around the address space are refused."""
        if (what.sframe_start + what.sframe_size >= _ADDRESS_LIMIT
                or what.text_start + what.text_size >= _ADDRESS_LIMIT):
            return -errno.EINVAL
        return self.add(what.sframe_start, what.sframe_start + what.sframe_size,
                        what.text_start, what.text_start + what.text_size, "[registered]")

    def unregister(self, what: SFrameRegistration) -> int:
        """``sframe_unregister``: by the table's address."""
        return self.remove(what.sframe_start)

    def prctl(self, option: str, *arguments: int) -> int:
        """``prctl(PR_ADD_SFRAME, sframe_start, sframe_end, text_start, text_end)`` and
        ``prctl(PR_REMOVE_SFRAME, sframe_start)``; other options or arities: -EINVAL."""
        if option == PR_ADD_SFRAME and len(arguments) == 4:
            return self.add(*arguments, "[prctl]")
        if option == PR_REMOVE_SFRAME and len(arguments) == 1:
            return self.remove(arguments[0])
        return -errno.EINVAL

    def _drop(self, section: SFrameSection, reason: str) -> None:
        index = self._sections.index(section)
        del self._sections[index]
        del self._starts[index]
        self.removals.append(Removal(section, reason))

    def dropped_damaged(self, name: str) -> bool:
        """Whether a section registered for the file ``name`` was removed because it
        faulted or was found corrupt while unwinding (not unmapped, not unregistered)."""
        return any(removal.reason in ("fault", "corrupt") and removal.section.name == name
                   for removal in self.removals)

    # -- registration checks -----------------------------------------------------------

    def _refusal(self, section: SFrameSection) -> int:
        """The errno the kernel refuses ``section`` with, or 0."""
        data = self.mm.read_bytes(section.sframe_start, section.sframe_end - section.sframe_start)
        if data is None:
            return -errno.EFAULT
        try:
            header = SFrameReader(data, section.sframe_start).header
        except (SFrameError, struct.error, ValueError):
            return -errno.EINVAL
        needed = F_FDE_SORTED | F_FDE_FUNC_START_PCREL
        if header.version != VERSION_3 or header.flags & needed != needed or header.auxhdr_len:
            return -errno.EINVAL
        if not header.num_fdes or not header.num_fres:
            return -errno.EINVAL
        if header.header_end >= len(data) or header.fres_start < header.fdes_end or (
                header.fres_end > len(data)):
            return -errno.EINVAL
        if self.validation:
            from ..format.validation import ERROR, validate

            findings = validate(data, section.sframe_start,
                                [(section.text_start, section.text_end)], kernel=True)
            if any(finding.severity == ERROR for finding in findings):
                return -errno.EINVAL
        return 0

    # -- lookups ---------------------------------------------------------------------

    def find_section(self, ip: int) -> SFrameSection | None:
        """The section whose text holds ``ip`` (``mtree_load``)."""
        index = bisect_right(self._starts, ip) - 1
        if index >= 0 and ip < self._sections[index].text_end:
            return self._sections[index]
        return None

    def find(self, ip: int) -> FrameRow | int:
        """``sframe_find``: the row for ``ip``, or a negative errno. -ENOENT: no section
        covers ``ip`` or it has no row there (the caller may try frame pointers); a
        section that faults or is corrupt is removed, and -EFAULT returned."""
        section = self.find_section(ip)
        if section is None:
            return -errno.ENOENT
        lookup = section.lookup
        if lookup is None:
            data = self.mm.read_bytes(section.sframe_start,
                                      section.sframe_end - section.sframe_start)
            if data is None:
                self._drop(section, "fault")
                return -errno.EFAULT
            try:
                lookup = section.lookup = SFrameLookup(SFrameReader(data, section.sframe_start))
            except (SFrameError, struct.error, ValueError, IndexError):
                self._drop(section, "corrupt")
                return -errno.EFAULT
        try:
            row = lookup.find_fre(ip)
        except (SFrameError, IndexError, ValueError, struct.error):
            self._drop(section, "corrupt")
            return -errno.EFAULT
        if row is None:
            return -errno.ENOENT
        return row
