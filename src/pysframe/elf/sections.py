"""Finding SFrame sections in ELF files.

pyelftools parses the ELF container (sections, segments, symbols, notes,
relocations), on first use only: the facts the unwinder needs at start-up (the
header, section and program headers, the build id, a linked file's .sframe) are
read by hand with ``struct``, which spares a warm ``sframe stack`` importing and
running pyelftools (about a fifth of its time). The layout of the file (ELF header, program and section header tables,
section-name table) is checked by hand first, so that bad input is reported as
one line naming the file and the byte offset instead of whatever pyelftools
raises; anything pyelftools still rejects later becomes an :class:`ElfError`.

Two things are hand-written:

* the search through ``PT_GNU_SFRAME`` when section headers are absent: the
  segment's length is taken from the SFrame header, because GNU ld makes
  ``p_filesz`` longer than the section (zero padding);
* applying the relocations against ``.sframe`` in relocatable objects, because
  pyelftools' ``RelocationHandler`` (0.33) has no recipe for the 64-bit
  PC-relative types SFrame V3 uses (``R_X86_64_PC64``, ``R_AARCH64_PREL64``,
  ``R_390_PC64``) nor for ``R_AARCH64_NONE``/``R_390_NONE`` (it does have the
  32-bit PC-relative and absolute ones). The value is computed as BFD does for objdump's dump of a relocatable
  file (every section at its ``sh_addr``, i.e. 0): ``S + A`` or ``S + A - P``.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from elftools.common.exceptions import ELFError as PyElfError

from .quick import target_name

SHT_GNU_SFRAME = 0x6FFFFFF4
PT_GNU_SFRAME = 0x6474E554
SHT_PROGBITS = 1
SHT_RELA = 4
SHT_REL = 9
SHF_EXECINSTR = 0x4
SHT_NOTE = 7
PT_NOTE = 4
PT_LOAD = 1
PT_INTERP = 3
PF_X = 0x1
NT_GNU_BUILD_ID = 3
SHN_XINDEX = 0xFFFF
PN_XNUM = 0xFFFF

EXIT_INVALID = 1
EXIT_UNREADABLE = 2

SFRAME_HEADER_SIZE = 28

_T = TypeVar("_T")

_MACHINE_NAMES = {62: "EM_X86_64", 183: "EM_AARCH64", 22: "EM_S390", 3: "EM_386",
                  40: "EM_ARM", 243: "EM_RISCV", 21: "EM_PPC64", 20: "EM_PPC"}
_TYPE_NAMES = {1: "REL", 2: "EXEC", 3: "DYN", 4: "CORE"}


@dataclass(slots=True, frozen=True)
class _SectionHeader:
    name: str
    type: int
    flags: int
    address: int
    offset: int
    size: int


class ElfError(Exception):
    """Bad or unreadable ELF input, as one line naming the file (and offset when known).

    ``exit_code`` is 1 for invalid data and 2 when the file cannot be read.
    """

    def __init__(self, path: str, message: str, offset: int | None = None,
                 exit_code: int = EXIT_INVALID) -> None:
        self.path = path
        self.message = " ".join(message.split())  # always one line
        self.offset = offset
        self.exit_code = exit_code
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" at offset {self.offset:#x}" if self.offset is not None else ""
        return f"{self.path}: {self.message}{where}"


@dataclass(slots=True, frozen=True)
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


def is_elf(data: bytes) -> bool:
    """Whether ``data`` starts with the ELF magic."""
    return data[:4] == b"\x7fELF"


def sframe_length(data: bytes) -> int | None:
    """Length of the SFrame section at the start of ``data``, from its header:
    ``28 + auxhdr_len + freoff + fre_len`` (or the end of the FDE table if that is
    later). ``None`` if ``data`` does not start with an SFrame header."""
    if len(data) < SFRAME_HEADER_SIZE or data[:2] not in (b"\xe2\xde", b"\xde\xe2"):
        return None
    order = "<" if data[:2] == b"\xe2\xde" else ">"
    num_fdes, _, fre_len, fdeoff, freoff = struct.unpack_from(order + "5I", data, 8)
    header_end = SFRAME_HEADER_SIZE + data[7]
    length: int = header_end + freoff + fre_len
    fde_size = {1: 17, 2: 20, 3: 16}.get(data[2])
    if fde_size is not None:
        length = max(length, header_end + fdeoff + num_fdes * fde_size)
    return length


class ElfImage:
    """An ELF file parsed with pyelftools, with the SFrame-specific lookups.

    The whole file is read once into ``data`` (or taken from ``data``); the ELF
    header and header tables are checked on construction, sections are parsed
    by pyelftools on demand.
    """

    def __init__(self, path: str, data: bytes | None = None) -> None:
        self.path = path
        if data is None:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError as error:
                raise ElfError(path, f"cannot read file: {error.strerror or error}",
                               exit_code=EXIT_UNREADABLE) from None
        self.data: bytes = data
        self._check_layout()
        self._elf: Any = None
        self.big_endian: bool = data[5] == 2
        self.elf_class: int = 64 if data[4] == 2 else 32
        order = ">" if self.big_endian else "<"
        e_type, e_machine = struct.unpack_from(order + "HH", data, 16)
        self.machine: str = _MACHINE_NAMES.get(e_machine) or self._pyelftools_field("e_machine")
        self.elf_type: str = _TYPE_NAMES.get(e_type) or self._pyelftools_field(
            "e_type").removeprefix("ET_")
        self._build_id: bytes | bool | None = False  # False: not looked up yet
        self._sections: list[Any] | None = None
        self._headers: list[_SectionHeader] | None = None

    @property
    def elf(self) -> Any:
        """The pyelftools ``ELFFile`` (imported and built on first use)."""
        if self._elf is None:
            from elftools.elf.elffile import ELFFile

            self._elf = self._guard(lambda: ELFFile(io.BytesIO(self.data)))
        return self._elf

    def _pyelftools_field(self, name: str) -> str:
        return str(self.elf[name])

    def _section_headers(self) -> list[_SectionHeader]:
        """(name, type, flags, addr, offset, size) of every section, read by hand (the
        layout, extended numbering included, was checked in the constructor)."""
        if self._headers is not None:
            return self._headers
        data, order = self.data, ">" if self.big_endian else "<"
        wide = self.elf_class == 64
        shoff = struct.unpack_from(order + ("Q" if wide else "I"), data, 0x28 if wide else 0x20)[0]
        shnum, shstrndx = struct.unpack_from(order + "HH", data, 0x3C if wide else 0x30)
        # sh_name sh_type sh_flags sh_addr sh_offset sh_size sh_link
        layout = struct.Struct(order + ("IIQQQQI" if wide else "7I"))
        size = 64 if wide else 40
        headers: list[_SectionHeader] = []
        if shoff:
            section0 = layout.unpack_from(data, shoff)
            shnum = shnum or section0[5]  # extended numbering: the count is in entry 0
            if shstrndx == SHN_XINDEX:
                shstrndx = section0[6]
        if shoff and shnum and shstrndx < shnum:
            entries = [layout.unpack_from(data, shoff + i * size) for i in range(shnum)]
            names_at, names_size = entries[shstrndx][4], entries[shstrndx][5]
            for sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, _ in entries:
                end = data.find(b"\0", names_at + sh_name, names_at + names_size)
                name = (data[names_at + sh_name:end].decode("utf-8", "replace")
                        if sh_name < names_size and end >= 0 else "")
                headers.append(_SectionHeader(name, sh_type, sh_flags, sh_addr, sh_offset,
                                              sh_size))
        self._headers = headers
        return headers

    def program_headers(self) -> list[tuple[int, int, int, int, int, int]]:
        """(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz) of every segment."""
        data, order = self.data, ">" if self.big_endian else "<"
        if self.elf_class == 64:
            phoff = struct.unpack_from(order + "Q", data, 0x20)[0]
            phnum = struct.unpack_from(order + "H", data, 0x38)[0]
            # p_type p_flags p_offset p_vaddr p_paddr p_filesz p_memsz p_align
            layout, size, fields = struct.Struct(order + "IIQQQQQQ"), 56, (0, 1, 2, 3, 5, 6)
        else:
            phoff = struct.unpack_from(order + "I", data, 0x1C)[0]
            phnum = struct.unpack_from(order + "H", data, 0x2C)[0]
            # p_type p_offset p_vaddr p_paddr p_filesz p_memsz p_flags p_align
            layout, size, fields = struct.Struct(order + "8I"), 32, (0, 6, 1, 2, 4, 5)
        out = []
        for index in range(phnum if phoff else 0):
            entry = layout.unpack_from(data, phoff + index * size)
            kind, flags, offset, vaddr, filesz, memsz = (entry[i] for i in fields)
            out.append((kind, flags, offset, vaddr, filesz, memsz))
        return out

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

    def _check_layout(self) -> None:
        """Check the ELF header and the bounds of the header tables by hand, so that
        these errors name the offset (pyelftools' messages do not)."""
        data = self.data
        size = len(data)
        if not is_elf(data):
            raise self._fail("file format not recognized (not an ELF file)", 0)
        if size < 16:
            raise self._fail(f"truncated ELF identification ({size} of 16 bytes)", 0)
        if data[4] not in (1, 2):
            raise self._fail(f"invalid ELF class {data[4]}", 4)
        if data[5] not in (1, 2):
            raise self._fail(f"invalid ELF data encoding {data[5]}", 5)
        wide = data[4] == 2
        order = ">" if data[5] == 2 else "<"
        header_size = 64 if wide else 52
        if size < header_size:
            raise self._fail(f"truncated ELF header ({size} of {header_size} bytes)", 0)
        if wide:
            phoff, shoff = struct.unpack_from(order + "QQ", data, 0x20)
            fields_at = 0x36
        else:
            phoff, shoff = struct.unpack_from(order + "II", data, 0x1C)
            fields_at = 0x2A
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(
            order + "5H", data, fields_at)
        ph_size, sh_size = (56, 64) if wide else (32, 40)

        if shoff:
            if shentsize != sh_size:
                raise self._fail(f"bad section header entry size {shentsize} "
                                 f"(expected {sh_size})", fields_at + 4)
            if shoff + sh_size > size:
                raise self._fail("truncated ELF section header table", shoff)
            section0 = (struct.unpack_from(order + "IIQQQQIIQQ", data, shoff) if wide
                        else struct.unpack_from(order + "10I", data, shoff))
            if shnum == 0:
                shnum = section0[5]  # extended numbering: the count is in sh_size of entry 0
            if shstrndx == SHN_XINDEX:
                shstrndx = section0[6]  # ... and the name-table index in its sh_link
            if phnum == PN_XNUM:
                phnum = section0[7]  # ... and the program header count in its sh_info
            if shoff + shnum * sh_size > size:
                raise self._fail(f"truncated ELF section header table ({shnum} entries)", shoff)
            if shnum and shstrndx >= shnum:
                raise self._fail(f"bad section name string table index {shstrndx}",
                                 fields_at + 8)
            if shnum:
                entry = shoff + shstrndx * sh_size
                names = (struct.unpack_from(order + "IIQQQQ", data, entry) if wide
                         else struct.unpack_from(order + "6I", data, entry))
                names_offset, names_size = names[4], names[5]
                if names_offset + names_size > size:
                    raise self._fail(f"section name string table (section {shstrndx}) runs "
                                     f"past the end of the file ({size:#x} bytes)", names_offset)
        if phoff and phnum:
            if phentsize != ph_size:
                raise self._fail(f"bad program header entry size {phentsize} "
                                 f"(expected {ph_size})", fields_at)
            if phoff + phnum * ph_size > size:
                raise self._fail(f"truncated ELF program header table ({phnum} entries)", phoff)

    def _guard(self, action: Callable[[], _T]) -> _T:
        """Run a pyelftools call, turning its failures on bad input into one-line errors."""
        try:
            return action()
        except ElfError:
            raise
        except (PyElfError, struct.error, ValueError, KeyError, IndexError, TypeError,
                AssertionError, OverflowError, UnicodeDecodeError, AttributeError,
                ZeroDivisionError, RecursionError, EOFError, MemoryError) as error:
            text = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ElfError(self.path, f"malformed ELF file: {text}") from None

    # --- identity ----------------------------------------------------------------------

    @property
    def target_name(self) -> str:
        """The BFD target name objdump prints after "file format"."""
        machine = struct.unpack_from(">H" if self.big_endian else "<H", self.data, 18)[0]
        return target_name(machine, 2 if self.elf_class == 64 else 1, self.big_endian)

    # --- sections ----------------------------------------------------------------------

    def _section_bytes(self, index: int, section: Any) -> tuple[bytes, int]:
        offset: int = section["sh_offset"]
        size: int = section["sh_size"]
        if offset + size > len(self.data):
            raise self._fail(f"section {section.name or index} (size {size:#x}) runs past the "
                             f"end of the file ({len(self.data):#x} bytes)", offset)
        return self.data[offset:offset + size], offset

    def sframe_sections(self, name: str = ".sframe") -> list[SFrameSectionData]:
        """The SFrame sections called ``name``: of type SHT_GNU_SFRAME, or SHT_PROGBITS
        literally called ``.sframe``; in a file without section headers, the
        PT_GNU_SFRAME segment (for ``.sframe`` only). Empty if there is none."""
        return self._guard(lambda: self._sframe_sections(name))

    def _sframe_sections(self, name: str) -> list[SFrameSectionData]:
        headers = self._section_headers()
        if not headers:
            return self._from_segment() if name == ".sframe" else []
        found = []
        for index, header in enumerate(headers):
            if header.name != name:
                continue
            if header.type == SHT_GNU_SFRAME:
                found_by = "section-type"
            elif header.type == SHT_PROGBITS and name == ".sframe":
                found_by = "section-name"
            else:
                continue
            if header.offset + header.size > len(self.data):
                raise self._fail(f"section {name} (size {header.size:#x}) runs past the end "
                                 f"of the file ({len(self.data):#x} bytes)", header.offset)
            raw = self.data[header.offset:header.offset + header.size]
            relocated, has_relocations = raw, False
            if self.elf_type == "REL":
                relocated, has_relocations = self._relocate(index, raw)
            found.append(SFrameSectionData(name, header.address, header.offset, raw, relocated,
                                           has_relocations, found_by, self.big_endian))
        return found

    def _from_segment(self) -> list[SFrameSectionData]:
        for segment in self.elf.iter_segments():
            if segment["p_type"] not in ("PT_GNU_SFRAME", PT_GNU_SFRAME):
                continue
            offset: int = segment["p_offset"]
            filesz: int = segment["p_filesz"]
            if offset + filesz > len(self.data):
                raise self._fail(f"PT_GNU_SFRAME segment (size {filesz:#x}) runs past the end "
                                 f"of the file ({len(self.data):#x} bytes)", offset)
            length = sframe_length(self.data[offset:offset + filesz])
            if length is None:
                raise self._fail("PT_GNU_SFRAME segment does not start with an SFrame header",
                                 offset)
            if length > filesz:
                raise self._fail(f"SFrame section in PT_GNU_SFRAME needs {length:#x} bytes, "
                                 f"the segment has {filesz:#x}", offset)
            raw = self.data[offset:offset + length]
            return [SFrameSectionData(".sframe", segment["p_vaddr"], offset, raw, raw, False,
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
            (index, s) for index, s in enumerate(self.all_sections())
            if s["sh_type"] in ("SHT_RELA", "SHT_REL", SHT_RELA, SHT_REL)
            and s["sh_info"] == target_index]
        if not relocation_sections:
            return raw, False
        table = _RELOCATIONS.get((self.machine, self.elf_class))
        out = bytearray(raw)
        order = ">" if self.big_endian else "<"
        target = elf.get_section(target_index)
        target_address: int = target["sh_addr"]
        for rel_index, section in relocation_sections:
            rel_name = section.name or f"section {rel_index}"
            self._section_bytes(rel_index, section)  # checks that the table is in the file
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
                    raise self._fail(f"unsupported relocation type {kind} for {self.machine} "
                                     f"in {rel_name} (entry {number}, r_offset {at:#x})",
                                     entry_at)
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
        def find() -> tuple[bytes, int, int] | None:
            for index, section in enumerate(self.all_sections()):
                if section.name == name and section["sh_type"] not in ("SHT_NOBITS", 8):
                    data, offset = self._section_bytes(index, section)
                    if relocated and self.elf_type == "REL":
                        data = self._relocate(index, data)[0]
                    return data, section["sh_addr"], offset
            return None
        return self._guard(find)

    def section_ranges(self, *names: str) -> dict[str, tuple[int, int]]:
        """[start, end) addresses of the named sections that exist."""
        def find() -> dict[str, tuple[int, int]]:
            return {s.name: (s["sh_addr"], s["sh_addr"] + s["sh_size"])
                    for s in self.all_sections() if s.name in names}
        return self._guard(find)

    def is_pie(self) -> bool:
        """An ET_DYN file with a program interpreter (a PIE executable, not a library)."""
        return self.elf_type == "DYN" and any(
            kind == PT_INTERP for kind, *_ in self.program_headers())

    # --- other facts -------------------------------------------------------------------

    def executable_ranges(self) -> list[tuple[int, int]]:
        """``[start, end)`` of executable code: PT_LOAD segments with PF_X, or (for
        relocatable objects, which have none) SHF_EXECINSTR sections."""
        def ranges() -> list[tuple[int, int]]:
            found = [(vaddr, vaddr + memsz)
                     for kind, flags, _, vaddr, _, memsz in self.program_headers()
                     if kind == PT_LOAD and flags & PF_X]
            if found:
                return found
            return [(s["sh_addr"], s["sh_addr"] + s["sh_size"]) for s in self.all_sections()
                    if s["sh_flags"] & SHF_EXECINSTR]
        return self._guard(ranges)

    def build_id(self) -> bytes | None:
        """The GNU build id (the NT_GNU_BUILD_ID note's descriptor), or ``None``. Notes
        are read from SHT_NOTE sections, or from PT_NOTE segments if there are no
        section headers. Looked up once (callers ask per frame)."""
        if self._build_id is False:
            self._build_id = self._find_build_id()
        return self._build_id  # type: ignore[return-value]

    def _find_build_id(self) -> bytes | None:
        headers = self._section_headers()
        if headers:
            areas = [(h.offset, h.size) for h in headers if h.type == SHT_NOTE]
        else:
            areas = [(offset, filesz) for kind, _, offset, _, filesz, _ in self.program_headers()
                     if kind == PT_NOTE]
        data, order = self.data, ">" if self.big_endian else "<"
        for start, size in areas:
            position, end = start, min(start + size, len(data))
            while position + 12 <= end:
                name_size, desc_size, kind = struct.unpack_from(order + "III", data, position)
                name_at = position + 12
                desc_at = name_at + ((name_size + 3) & ~3)
                following = desc_at + ((desc_size + 3) & ~3)
                if following > end or following <= position:
                    break
                if kind == NT_GNU_BUILD_ID and data[name_at:name_at + name_size] == b"GNU\0":
                    return bytes(data[desc_at:desc_at + desc_size])
                position = following
        return None
