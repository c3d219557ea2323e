"""Finding SFrame sections in ELF files.

The ELF header, section and program headers, notes and the build id come from
:mod:`.headers` (read by hand, layouts declared once); that covers everything the
unwinder and ``sframe dump`` need at start-up. pyelftools parses what needs more (the
relocation tables), on first use only; anything it rejects becomes an :class:`ElfError`
naming the file.

Two things are hand-written:

* the search through ``PT_GNU_SFRAME`` when section headers are absent: the
  segment's length is taken from the SFrame header (``format.sframe_extent``), because
  GNU ld makes ``p_filesz`` longer than the section (zero padding);
* applying the relocations against ``.sframe`` in relocatable objects, because
  pyelftools' ``RelocationHandler`` (0.33) has no recipe for the 64-bit
  PC-relative types SFrame V3 uses (``R_X86_64_PC64``, ``R_AARCH64_PREL64``,
  ``R_390_PC64``) nor for ``R_AARCH64_NONE``/``R_390_NONE`` (it does have the
  32-bit PC-relative and absolute ones). The value is computed as BFD does for objdump's dump of a relocatable
  file (every section at its ``sh_addr``, i.e. 0): ``S + A`` or ``S + A - P``.
"""

from __future__ import annotations

import io
import mmap
import os
import struct

from ..format.decode import sframe_extent
from ..format.errors import BadMagicError, SFrameError, UnsupportedVersionError
from ..inputs import InputError, load_with_status
from ..records import record_class
from .headers import (
    ET_REL,
    PF_X,
    PT_GNU_SFRAME,
    PT_INTERP,
    PT_LOAD,
    SHF_EXECINSTR,
    SHT_GNU_SFRAME,
    SHT_PROGBITS,
    SHT_REL,
    SHT_RELA,
    ElfError,
    FileHeader,
    ProgramHeader,
    SectionHeader,
    find_build_id,
    is_elf,
    note_areas,
    read_file_header,
    read_program_headers,
    read_section_headers,
    target_name,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    _T = TypeVar("_T")

#: What pyelftools (or the reading done by hand) raises on a malformed file, besides
#: pyelftools' own error class (see :func:`_malformed`).
_MALFORMED: tuple[type[Exception], ...] = (
    struct.error, ValueError, KeyError, IndexError, TypeError, AssertionError, OverflowError,
    UnicodeDecodeError, AttributeError, ZeroDivisionError, RecursionError, EOFError,
    MemoryError)


def _malformed() -> tuple[type[Exception], ...]:
    """The errors :meth:`ElfImage._guard` turns into :class:`ElfError`. pyelftools' error
    class is imported here, once something was raised: the calls it guards on the paths
    that need only the headers (a warm ``sframe stack``) never import pyelftools."""
    from elftools.common.exceptions import ELFError as PyElfError

    return (PyElfError, *_MALFORMED)

_MACHINE_NAMES = {62: "EM_X86_64", 183: "EM_AARCH64", 22: "EM_S390", 3: "EM_386",
                  40: "EM_ARM", 243: "EM_RISCV", 21: "EM_PPC64", 20: "EM_PPC"}
_TYPE_NAMES = {1: "REL", 2: "EXEC", 3: "DYN", 4: "CORE"}


@record_class(frozen=True)
class SFrameSectionData:
    """The bytes of one SFrame section and where they come from.

    ``found_by`` is ``"section-type"`` (SHT_GNU_SFRAME), ``"section-name"``
    (SHT_PROGBITS called ``.sframe``, binutils 2.40-2.44) or ``"segment"``
    (PT_GNU_SFRAME of a file without section headers).
    """

    name: str
    address: int
    file_offset: int
    raw: bytes
    relocated: bytes
    has_relocations: bool
    found_by: str
    big_endian: bool


#: (width in bytes, PC-relative) per relocation type, per (e_machine, ELF class).
#: Width 0 marks the no-op types.
_RELOCATIONS: dict[tuple[str, int], dict[int, tuple[int, bool]]] = {
    ("EM_X86_64", 64): {0: (0, False), 1: (8, False), 2: (4, True), 10: (4, False),
                        11: (4, False), 24: (8, True)},
    ("EM_AARCH64", 64): {0: (0, False), 256: (0, False), 257: (8, False), 258: (4, False),
                         260: (8, True), 261: (4, True)},
    ("EM_S390", 64): {0: (0, False), 4: (4, False), 5: (4, True), 22: (8, False),
                      23: (8, True)},
}
_RELOCATIONS[("EM_X86_64", 32)] = _RELOCATIONS[("EM_X86_64", 64)]  # x32
_RELOCATIONS[("EM_S390", 32)] = {0: (0, False), 4: (4, False), 5: (4, True)}


class ElfImage:
    """An ELF file: its headers read by hand, pyelftools for the rest on demand.

    ``data`` is the file's contents (read whole when small, mapped when large; see
    :mod:`pysframe.inputs`); the ELF header and the bounds of the header tables are checked
    on construction.
    """

    def __init__(self, path: str, data: bytes | mmap.mmap | None = None) -> None:
        self.path = path
        #: The status of the descriptor ``data`` was read from (None: bytes given): the
        #: cache trusts an entry made from this very file, unchanged, without hashing.
        self.status: os.stat_result | None = None
        if data is None:
            try:  # a regular file only; large ones mapped, not read
                data, self.status = load_with_status(path)
            except InputError as error:
                raise ElfError(path, error.message, unreadable=True) from None
        self.data: bytes | mmap.mmap = data
        self.header: FileHeader = read_file_header(data, path)
        self._elf: Any = None
        self.big_endian: bool = self.header.big_endian
        self.elf_class: int = self.header.elf_class
        self.machine: str = (_MACHINE_NAMES.get(self.header.machine)
                             or self._pyelftools_field("e_machine"))
        self.elf_type: str = (_TYPE_NAMES.get(self.header.type)
                              or self._pyelftools_field("e_type").removeprefix("ET_"))
        self._build_id: bytes | bool | None = False  # False: not looked up yet
        self._sections: list[Any] | None = None
        self._headers: list[SectionHeader] | None = None
        self._segments: list[ProgramHeader] | None = None

    @property
    def elf(self) -> Any:
        """The pyelftools ``ELFFile`` (imported and built on first use)."""
        if self._elf is None:
            from typing import IO, cast  # with pyelftools, which imports typing anyway

            from elftools.elf.elffile import ELFFile

            data = self.data
            stream = data if isinstance(data, mmap.mmap) else io.BytesIO(data)
            self._elf = self._guard(lambda: ELFFile(cast("IO[bytes]", stream)))
        return self._elf

    def _pyelftools_field(self, name: str) -> str:
        return str(self.elf[name])

    def section_headers(self) -> list[SectionHeader]:
        """Every section header (read once)."""
        if self._headers is None:
            self._headers = read_section_headers(self.data, self.header)
        return self._headers

    def section_header(self, name: str) -> SectionHeader | None:
        """The first section header called ``name``, or ``None``."""
        return next((s for s in self.section_headers() if s.name == name), None)

    def program_headers(self) -> list[ProgramHeader]:
        """Every program header (read once)."""
        if self._segments is None:
            self._segments = read_program_headers(self.data, self.header)
        return self._segments

    def all_sections(self) -> list[Any]:
        """pyelftools' section objects, parsed once (pyelftools parses every header again
        on each iteration: 640 header parses made a third of a `sframe stack` run)."""
        if self._sections is None:
            self._sections = self._guard(lambda: list(self.elf.iter_sections()))
        return self._sections

    def section_by_name(self, name: str) -> Any | None:
        """The first section called ``name`` (a pyelftools section), or ``None``."""
        return next((s for s in self.all_sections() if s.name == name), None)

    # --- checking ----------------------------------------------------------------------

    def _fail(self, message: str, offset: int | None) -> ElfError:
        return ElfError(self.path, message, offset)

    def _guard(self, action: Callable[[], _T]) -> _T:
        """Run a pyelftools call, turning its failures on bad input into one-line errors."""
        try:
            return action()
        except ElfError:
            raise
        except Exception as error:
            if not isinstance(error, _malformed()):
                raise
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ElfError(self.path, f"malformed ELF file: {text}") from None

    # --- identity ----------------------------------------------------------------------

    @property
    def target_name(self) -> str:
        """The BFD target name objdump prints after "file format"."""
        return target_name(self.header.machine, 2 if self.elf_class == 64 else 1,
                           self.big_endian)

    # --- sections ----------------------------------------------------------------------

    def section_bytes(self, header: SectionHeader) -> bytes:
        """The contents of a section, checked to lie inside the file."""
        if header.offset + header.size > len(self.data):
            raise self._fail(f"section {header.name or header.number} (size {header.size:#x}) "
                             f"runs past the end of the file ({len(self.data):#x} bytes)",
                             header.offset)
        return self.data[header.offset:header.offset + header.size]

    def sframe_sections(self, name: str = ".sframe") -> list[SFrameSectionData]:
        """The SFrame sections called ``name``: of type SHT_GNU_SFRAME, or SHT_PROGBITS
        literally called ``.sframe``; in a file without section headers, the
        PT_GNU_SFRAME segment (for ``.sframe`` only). Empty if there is none."""
        return self._guard(lambda: self._sframe_sections(name))

    def _sframe_sections(self, name: str) -> list[SFrameSectionData]:
        headers = self.section_headers()
        if not headers:
            return self._from_segment() if name == ".sframe" else []
        found = []
        for header in headers:
            if header.name != name:
                continue
            if header.type == SHT_GNU_SFRAME:
                found_by = "section-type"
            elif header.type == SHT_PROGBITS and name == ".sframe":
                found_by = "section-name"
            else:
                continue
            raw = self.section_bytes(header)
            relocated, has_relocations = raw, False
            if self.header.type == ET_REL:
                relocated, has_relocations = self._relocate(header.number, raw)
            found.append(SFrameSectionData(name, header.address, header.offset, raw, relocated,
                                           has_relocations, found_by, self.big_endian))
        return found

    def _from_segment(self) -> list[SFrameSectionData]:
        for segment in self.program_headers():
            if segment.type != PT_GNU_SFRAME:
                continue
            offset, filesz = segment.offset, segment.filesz
            if offset + filesz > len(self.data):
                raise self._fail(f"PT_GNU_SFRAME segment (size {filesz:#x}) runs past the end "
                                 f"of the file ({len(self.data):#x} bytes)", offset)
            try:
                length = sframe_extent(memoryview(self.data)[offset:])
            except (BadMagicError, UnsupportedVersionError):
                raise self._fail("PT_GNU_SFRAME segment does not start with an SFrame header",
                                 offset) from None
            except SFrameError as error:
                raise self._fail(f"SFrame section in PT_GNU_SFRAME: {error.message}",
                                 offset) from None
            if length > filesz:
                raise self._fail(f"SFrame section in PT_GNU_SFRAME needs {length:#x} bytes, "
                                 f"the segment has {filesz:#x}", offset)
            raw = self.data[offset:offset + length]
            return [SFrameSectionData(".sframe", segment.vaddr, offset, raw, raw, False,
                                      "segment", self.big_endian)]
        return []

    # --- relocations -------------------------------------------------------------------

    def _relocate(self, target_index: int, raw: bytes) -> tuple[bytes, bool]:
        """``raw`` (the contents of section ``target_index``) with the REL/RELA
        relocations against it applied the way objdump sees a relocatable file:
        S = st_value, A = r_addend (RELA) or the stored value (REL), P = sh_addr +
        r_offset; the result is truncated to the field's width."""
        elf = self.elf
        relocation_sections = [
            (header.number, self.all_sections()[header.number])
            for header in self.section_headers()
            if header.type in (SHT_RELA, SHT_REL) and header.info == target_index]
        if not relocation_sections:
            return raw, False
        table = _RELOCATIONS.get((self.machine, self.elf_class))
        out = bytearray(raw)
        order = ">" if self.big_endian else "<"
        target = elf.get_section(target_index)
        target_address: int = target["sh_addr"]
        for rel_index, section in relocation_sections:
            rel_name = section.name or f"section {rel_index}"
            self.section_bytes(self.section_headers()[rel_index])  # the table is in the file
            is_rela = section["sh_type"] in ("SHT_RELA", SHT_RELA)
            entry_size: int = section["sh_entsize"] or (
                (24 if is_rela else 16) if self.elf_class == 64 else (12 if is_rela else 8))
            symbols = elf.get_section(section["sh_link"])
            if not hasattr(symbols, "get_symbol"):
                raise self._fail(f"{rel_name} links to section {section['sh_link']}, "
                                 "which is not a symbol table", section["sh_offset"])
            num_symbols: int = symbols.num_symbols()
            for number, relocation in enumerate(section.iter_relocations()):
                entry_at = section["sh_offset"] + number * entry_size
                kind: int = relocation["r_info_type"]
                at: int = relocation["r_offset"]
                if table is None or kind not in table:
                    raise ElfError(self.path, f"unsupported relocation type {kind} for "
                                   f"{self.machine} in {rel_name} (entry {number}, r_offset "
                                   f"{at:#x})", entry_at, unsupported=True)
                width, pc_relative = table[kind]
                if width == 0:
                    continue
                if at + width > len(out):
                    raise self._fail(f"relocation in {rel_name} (entry {number}) at {at:#x} "
                                     f"(+{width} bytes) is outside {target.name} "
                                     f"(size {len(out):#x})", entry_at)
                symbol_index: int = relocation["r_info_sym"]
                if symbol_index >= num_symbols:
                    raise self._fail(f"relocation in {rel_name} (entry {number}) names symbol "
                                     f"{symbol_index} of {num_symbols}", entry_at)
                signed = order + ("q" if width == 8 else "i")
                addend: int = (relocation["r_addend"] if is_rela
                               else struct.unpack_from(signed, raw, at)[0])
                value: int = symbols.get_symbol(symbol_index)["st_value"] if symbol_index else 0
                result = value + addend - ((target_address + at) if pc_relative else 0)
                struct.pack_into(order + ("Q" if width == 8 else "I"), out, at,
                                 result & ((1 << (8 * width)) - 1))
        return bytes(out), True

    def section(self, name: str, relocated: bool = False) -> tuple[bytes, int, int] | None:
        """(bytes, sh_addr, file offset) of the first section called ``name``, or ``None``;
        with ``relocated``, a relocatable object's relocations against it applied."""
        found = next((s for s in self.section_headers() if s.name == name and s.has_contents),
                     None)
        if found is None:
            return None
        data = self.section_bytes(found)
        if relocated and self.header.type == ET_REL:
            data = self._guard(lambda: self._relocate(found.number, data)[0])
        return data, found.address, found.offset

    def section_ranges(self, *names: str) -> dict[str, tuple[int, int]]:
        """[start, end) addresses of the named sections that exist."""
        found: dict[str, tuple[int, int]] = {}
        for header in self.section_headers():
            if header.name in names:
                found[header.name] = (header.address, header.address + header.size)
        return found

    def is_pie(self) -> bool:
        """An ET_DYN file with a program interpreter (a PIE executable, not a library)."""
        return self.elf_type == "DYN" and any(
            segment.type == PT_INTERP for segment in self.program_headers())

    # --- other facts -------------------------------------------------------------------

    def executable_ranges(self) -> list[tuple[int, int]]:
        """``[start, end)`` of executable code: PT_LOAD segments with PF_X, or (for
        relocatable objects, which have none) SHF_EXECINSTR sections."""
        found = [(p.vaddr, p.vaddr + p.memsz) for p in self.program_headers()
                 if p.type == PT_LOAD and p.flags & PF_X]
        if found:
            return found
        return [(s.address, s.address + s.size) for s in self.section_headers()
                if s.flags & SHF_EXECINSTR]

    def build_id(self) -> bytes | None:
        """The GNU build id (the NT_GNU_BUILD_ID note's descriptor), or ``None``. Notes
        are read from SHT_NOTE sections, or from PT_NOTE segments if there are no
        section headers. Looked up once (callers ask per frame)."""
        if self._build_id is False:
            areas = note_areas(self.data, self.header, self.section_headers())
            self._build_id = find_build_id(self.data, areas, self.big_endian)
        return self._build_id  # type: ignore[return-value]


__all__ = ["ElfError", "ElfImage", "SFrameSectionData", "is_elf"]
