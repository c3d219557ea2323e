"""Finding SFrame sections in ELF files.

pyelftools parses the ELF container (headers, sections, segments, symbols,
notes). Two things are hand-written: the search through ``PT_GNU_SFRAME`` when
section headers are stripped (the segment's length is taken from the SFrame
header, since ld makes ``p_filesz`` too long), and applying ``.rela.sframe``
relocations, because pyelftools' RelocationHandler has no recipe for the
64-bit PC-relative types SFrame V3 uses (R_X86_64_PC64, R_AARCH64_PREL64,
R_390_PC64).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from elftools.common.exceptions import ELFError as PyElfError
from elftools.elf.elffile import ELFFile

from .quick import target_name

SHT_GNU_SFRAME = 0x6FFFFFF4
PT_GNU_SFRAME = 0x6474E554
SHT_PROGBITS = 1
SHT_RELA = 4
SHT_REL = 9
SHF_EXECINSTR = 0x4
PF_X = 0x1
NT_GNU_BUILD_ID = 3

EXIT_INVALID = 1
EXIT_UNREADABLE = 2


class ElfError(Exception):
    """Bad or unreadable ELF input, as one line naming the file (and offset when known)."""

    def __init__(self, path: str, message: str, offset: int | None = None,
                 exit_code: int = EXIT_INVALID) -> None:
        self.path = path
        self.message = message
        self.offset = offset
        self.exit_code = exit_code
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" at offset {self.offset:#x}" if self.offset is not None else ""
        return f"{self.path}: {self.message}{where}"


@dataclass(slots=True, frozen=True)
class SFrameSectionData:
    """The bytes of one SFrame section and where they come from."""

    name: str
    address: int
    file_offset: int
    raw: bytes
    relocated: bytes
    has_relocations: bool
    found_by: str
    big_endian: bool


#: (width in bytes, PC-relative) per relocation type, per e_machine.
_RELOCATIONS: dict[str, dict[int, tuple[int, bool]]] = {
    "EM_X86_64": {0: (0, False), 1: (8, False), 2: (4, True), 10: (4, False), 11: (4, False),
                  24: (8, True)},
    "EM_AARCH64": {0: (0, False), 256: (0, False), 257: (8, False), 258: (4, False),
                   260: (8, True), 261: (4, True)},
    "EM_S390": {0: (0, False), 4: (4, False), 5: (4, True), 22: (8, False), 23: (8, True)},
}



def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


class ElfImage:
    """An ELF file parsed lazily with pyelftools, with the SFrame-specific lookups."""

    def __init__(self, path: str, data: bytes | None = None) -> None:
        self.path = path
        if data is None:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError as error:
                raise ElfError(path, f"cannot read: {error.strerror or error}",
                               exit_code=EXIT_UNREADABLE) from None
        self.data = data
        if not is_elf(data):
            raise ElfError(path, "file format not recognized (not an ELF file)", 0)
        if len(data) < 52:
            raise ElfError(path, f"truncated ELF header ({len(data)} bytes)", 0)
        self.elf: Any = self._guard(lambda: ELFFile(io.BytesIO(data)))
        self.big_endian = not self.elf.little_endian
        self.elf_class: int = self.elf.elfclass
        self.machine: str = self.elf["e_machine"]
        self.elf_type: str = str(self.elf["e_type"]).replace("ET_", "")

    def _guard(self, action: Any) -> Any:
        """Run a pyelftools call, turning its failures on bad input into one-line errors."""
        try:
            return action()
        except ElfError:
            raise
        except (PyElfError, struct.error, ValueError, KeyError, IndexError, TypeError,
                AssertionError, OverflowError, UnicodeDecodeError, AttributeError,
                ZeroDivisionError, RecursionError, EOFError) as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ElfError(self.path, f"malformed ELF file: {text}") from None

    @property
    def target_name(self) -> str:
        """The BFD target name objdump prints after "file format"."""
        machine = struct.unpack_from(">H" if self.big_endian else "<H", self.data, 18)[0]
        return target_name(machine, 2 if self.elf_class == 64 else 1, self.big_endian)

    # --- sections ----------------------------------------------------------------------

    def _section_bytes(self, index: int, section: Any) -> tuple[bytes, int]:
        offset = section["sh_offset"]
        size = section["sh_size"]
        if offset + size > len(self.data):
            raise ElfError(self.path, f"section {section.name or index} (size {size:#x}) runs past "
                           f"the end of the file ({len(self.data):#x} bytes)", offset)
        return self.data[offset:offset + size], offset

    def sframe_sections(self, name: str = ".sframe") -> list[SFrameSectionData]:
        """The SFrame sections called ``name`` (via PT_GNU_SFRAME if there are no sections)."""
        return self._guard(lambda: self._sframe_sections(name))  # type: ignore[no-any-return]

    def _sframe_sections(self, name: str) -> list[SFrameSectionData]:
        elf = self.elf
        if elf.num_sections() == 0:
            return self._from_segment()
        found = []
        for index, section in enumerate(elf.iter_sections()):
            if section.name != name:
                continue
            kind = section["sh_type"]
            if kind == "SHT_GNU_SFRAME" or kind == SHT_GNU_SFRAME:
                found_by = "section-type"
            elif kind in ("SHT_PROGBITS", SHT_PROGBITS) and name == ".sframe":
                found_by = "section-name"
            else:
                continue
            raw, offset = self._section_bytes(index, section)
            relocated, has_relocations = self._relocate(index, raw)
            found.append(SFrameSectionData(name, section["sh_addr"], offset, raw, relocated,
                                           has_relocations, found_by, self.big_endian))
        return found

    def _from_segment(self) -> list[SFrameSectionData]:
        for segment in self.elf.iter_segments():
            kind = segment["p_type"]
            if kind not in ("PT_GNU_SFRAME", PT_GNU_SFRAME):
                continue
            offset = segment["p_offset"]
            filesz = segment["p_filesz"]
            if offset + filesz > len(self.data):
                raise ElfError(self.path, "PT_GNU_SFRAME segment runs past the end of the file",
                               offset)
            length = _sframe_length(self.data[offset:offset + filesz])
            if length is None or length > filesz:
                raise ElfError(self.path, "PT_GNU_SFRAME segment does not hold a whole SFrame "
                               "section", offset)
            raw = self.data[offset:offset + length]
            return [SFrameSectionData(".sframe", segment["p_vaddr"], offset, raw, raw, False,
                                      "segment", self.big_endian)]
        return []

    # --- relocations -------------------------------------------------------------------

    def _relocate(self, target_index: int, raw: bytes) -> tuple[bytes, bool]:
        """``raw`` with the relocations against section ``target_index`` applied, as a
        relocatable dump sees them: every section at address 0."""
        elf = self.elf
        relocations = [s for s in elf.iter_sections()
                       if s["sh_type"] in ("SHT_RELA", "SHT_REL", SHT_RELA, SHT_REL)
                       and s["sh_info"] == target_index]
        if not relocations:
            return raw, False
        table = _RELOCATIONS.get(self.machine)
        out = bytearray(raw)
        order = ">" if self.big_endian else "<"
        target_address = elf.get_section(target_index)["sh_addr"]
        for section in relocations:
            is_rela = section["sh_type"] in ("SHT_RELA", SHT_RELA)
            symbols = elf.get_section(section["sh_link"])
            for relocation in section.iter_relocations():
                kind = relocation["r_info_type"]
                at = relocation["r_offset"]
                if table is None or kind not in table:
                    raise ElfError(self.path, f"unsupported relocation type {kind} in "
                                   f"{section.name}", section["sh_offset"])
                width, pc_relative = table[kind]
                if width == 0:
                    continue
                if at + width > len(out):
                    raise ElfError(self.path, f"relocation in {section.name} at {at:#x} is "
                                   "outside the section", section["sh_offset"])
                fmt = order + ("q" if width == 8 else "i")
                addend = relocation["r_addend"] if is_rela else struct.unpack_from(fmt, raw, at)[0]
                symbol_index = relocation["r_info_sym"]
                value = symbols.get_symbol(symbol_index)["st_value"] if symbol_index else 0
                result = value + addend - ((target_address + at) if pc_relative else 0)
                mask = (1 << (8 * width)) - 1
                struct.pack_into(order + ("Q" if width == 8 else "I"), out, at, result & mask)
        return bytes(out), True

    def section(self, name: str, relocated: bool = False) -> tuple[bytes, int, int] | None:
        """(bytes, sh_addr, file offset) of the first section called ``name``, or ``None``;
        with ``relocated``, a relocatable object's relocations against it applied."""
        def find() -> tuple[bytes, int, int] | None:
            for index, section in enumerate(self.elf.iter_sections()):
                if section.name == name and section["sh_type"] not in ("SHT_NOBITS", 8):
                    data, offset = self._section_bytes(index, section)
                    if relocated and self.elf_type == "REL":
                        data = self._relocate(index, data)[0]
                    return data, section["sh_addr"], offset
            return None
        return self._guard(find)  # type: ignore[no-any-return]

    def section_ranges(self, *names: str) -> dict[str, tuple[int, int]]:
        """[start, end) addresses of the named sections that exist."""
        def find() -> dict[str, tuple[int, int]]:
            return {s.name: (s["sh_addr"], s["sh_addr"] + s["sh_size"])
                    for s in self.elf.iter_sections() if s.name in names}
        return self._guard(find)  # type: ignore[no-any-return]

    def is_pie(self) -> bool:
        """An ET_DYN file with a program interpreter (a PIE executable, not a library)."""
        return self.elf_type == "DYN" and bool(self._guard(
            lambda: any(s["p_type"] == "PT_INTERP" for s in self.elf.iter_segments())))

    # --- other facts -------------------------------------------------------------------

    def executable_ranges(self) -> list[tuple[int, int]]:
        """``[start, end)`` of executable code: PF_X segments, else SHF_EXECINSTR sections."""
        def ranges() -> list[tuple[int, int]]:
            found = [(s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in self.elf.iter_segments()
                     if s["p_type"] == "PT_LOAD" and s["p_flags"] & PF_X]
            if found:
                return found
            return [(s["sh_addr"], s["sh_addr"] + s["sh_size"]) for s in self.elf.iter_sections()
                    if s["sh_flags"] & SHF_EXECINSTR]
        return self._guard(ranges)  # type: ignore[no-any-return]

    def build_id(self) -> bytes | None:
        """The GNU build id (NT_GNU_BUILD_ID), or ``None``."""
        def find() -> bytes | None:
            for section in self.elf.iter_sections():
                if section["sh_type"] != "SHT_NOTE":
                    continue
                for note in section.iter_notes():
                    if note["n_type"] == "NT_GNU_BUILD_ID":
                        return bytes.fromhex(note["n_desc"])
            return None
        return self._guard(find)  # type: ignore[no-any-return]


def _sframe_length(data: bytes) -> int | None:
    """Length of an SFrame section from its header (28 + aux + max(FDE end, FRE end))."""
    if len(data) < 28 or data[:2] not in (b"\xe2\xde", b"\xde\xe2"):
        return None
    order = "<" if data[:2] == b"\xe2\xde" else ">"
    auxhdr_len = data[7]
    fields: tuple[int, ...] = struct.unpack_from(order + "5I", data, 8)
    num_fdes, _, fre_len, fdeoff, freoff = fields
    version = data[2]
    fde_size = {1: 17, 2: 20, 3: 16}.get(version)
    if fde_size is None:
        return None
    header_end = 28 + auxhdr_len
    return max(header_end + freoff + fre_len, header_end + fdeoff + num_fdes * fde_size)
