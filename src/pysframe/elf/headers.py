"""ELF headers, read once for every stage: the file header, section headers, program
headers, notes and symbol entries, for both classes and byte orders.

Hand-written rather than pyelftools because the paths that need only these (``sframe
dump``, a warm ``sframe stack``, the DWARF locator, cores) should not pay pyelftools'
import and per-header ``construct`` parsing; pyelftools is still used for what needs more
(relocations). Like pyelftools' ``elf/structs.py``, each layout is declared once per
(class, byte order) in :data:`LAYOUTS`. Every read is bounds-checked against the buffer;
a violation raises :class:`ElfError` with the file offset.

The records are named tuples: immutable, typed, cheap to build (a file has hundreds of
section headers, and a frozen dataclass costs ten times more to define at start-up).

Extended numbering is resolved here once: ``e_shnum == 0`` takes the count from
``sh_size`` of section 0, ``e_shstrndx == SHN_XINDEX`` the name-table index from its
``sh_link`` and ``e_phnum == PN_XNUM`` the program-header count from its ``sh_info``.
"""

from __future__ import annotations

import struct

from ..errors import PysframeError
from ..records import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

SHN_XINDEX = 0xFFFF
PN_XNUM = 0xFFFF
SHT_PROGBITS = 1
SHT_SYMTAB = 2
SHT_RELA = 4
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_REL = 9
SHT_DYNSYM = 11
SHT_GNU_SFRAME = 0x6FFFFFF4
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
SHF_COMPRESSED = 0x800
PT_LOAD = 1
PT_INTERP = 3
PT_NOTE = 4
PT_GNU_SFRAME = 0x6474E554
PF_X = 0x1
ET_REL = 1
ET_EXEC = 2
ET_DYN = 3
ET_CORE = 4
NT_GNU_BUILD_ID = 3
SHN_LORESERVE = 0xFF00  # SHN_ABS, SHN_COMMON, ...: no section
STT_NOTYPE = 0
STT_OBJECT = 1
STT_FUNC = 2
STT_SECTION = 3
STT_FILE = 4
STT_GNU_IFUNC = 10
STV_INTERNAL = 1
STV_HIDDEN = 2
#: A symbol's binding (st_info >> 4) by name, as pyelftools names them; any other is
#: taken as local where a name is needed.
BINDING_NAMES = ("STB_LOCAL", "STB_GLOBAL", "STB_WEAK")
#: The last 64-bit address (a symbol whose end would pass it ends there).
LAST_ADDRESS = (1 << 64) - 1


class ElfError(PysframeError):
    """Bad or unreadable ELF input, as one line naming the file (and offset when known)."""

    def __init__(self, path: str, message: str, offset: int | None = None, *,
                 unreadable: bool = False, unsupported: bool = False) -> None:
        super().__init__(" ".join(message.split()), offset, path=path, unreadable=unreadable)
        #: Valid ELF that this tool does not handle (a relocation type it does not apply):
        #: not damage in the file.
        self.unsupported = unsupported


class Layout(NamedTuple):
    """The struct layouts of one ELF class and byte order."""

    order: str
    wide: bool
    #: e_type .. e_shstrndx (after e_ident).
    file_header: struct.Struct
    #: sh_name sh_type sh_flags sh_addr sh_offset sh_size sh_link sh_info sh_addralign sh_entsize
    section: struct.Struct
    #: the program header, in the class's own field order.
    segment: struct.Struct
    #: st_name st_info st_other st_shndx st_value st_size (64-bit order; 32-bit differs).
    symbol: struct.Struct
    note: struct.Struct
    word: struct.Struct  # an address-sized unsigned word
    #: r_offset r_info r_addend of a RELA entry (r_info: symbol << 32 | type in 64-bit,
    #: symbol << 8 | type in 32-bit files; see :func:`relocation_symbol`).
    rela: struct.Struct


def _layout(wide: bool, big_endian: bool) -> Layout:
    order = ">" if big_endian else "<"
    if wide:
        return Layout(order, True, struct.Struct(order + "HHIQQQIHHHHHH"),
                      struct.Struct(order + "IIQQQQIIQQ"), struct.Struct(order + "IIQQQQQQ"),
                      struct.Struct(order + "IBBHQQ"), struct.Struct(order + "III"),
                      struct.Struct(order + "Q"), struct.Struct(order + "QQq"))
    return Layout(order, False, struct.Struct(order + "HHIIIIIHHHHHH"),
                  struct.Struct(order + "10I"), struct.Struct(order + "8I"),
                  struct.Struct(order + "IIIBBH"), struct.Struct(order + "III"),
                  struct.Struct(order + "I"), struct.Struct(order + "IIi"))


#: Layouts by (64-bit, big-endian).
LAYOUTS = {(wide, big): _layout(wide, big) for wide in (False, True) for big in (False, True)}
IDENT_SIZE = 16


class FileHeader(NamedTuple):
    """The ELF header, extended numbering resolved."""

    layout: Layout
    type: int
    machine: int
    entry: int
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int

    @property
    def elf_class(self) -> int:
        """32 or 64."""
        return 64 if self.layout.wide else 32

    @property
    def big_endian(self) -> bool:
        return self.layout.order == ">"


class SectionHeader(NamedTuple):
    number: int  # the section's index in the table
    name: str
    type: int
    flags: int
    address: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int

    @property
    def has_contents(self) -> bool:
        return self.type != SHT_NOBITS


class ProgramHeader(NamedTuple):
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class Note(NamedTuple):
    """One note: ``name`` without its NUL, the descriptor at ``desc_offset`` in the buffer."""

    name: bytes
    type: int
    desc_offset: int
    desc_size: int


if TYPE_CHECKING:  # types only: a reader needs no mmap module to read a buffer
    import mmap
    from typing import TypeAlias

    #: What the readers read from: file contents, a view of them, or the mapped file.
    Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap


def relocation_symbol(info: int, wide: bool) -> int:
    """The symbol index of a relocation's ``r_info``."""
    return info >> 32 if wide else info >> 8


def is_elf(data: Buffer) -> bool:
    """Whether ``data`` starts with the ELF magic."""
    return bytes(data[:4]) == b"\x7fELF"


_MACHINES = {62: "x86-64", 3: "i386", 22: "s390", 183: "aarch64", 40: "arm"}


def target_name(machine: int, elf_class: int, big_endian: bool) -> str:
    """The BFD target name objdump prints after "file format"."""
    bits = 64 if elf_class == 2 else 32
    kind = _MACHINES.get(machine)
    if kind == "aarch64":
        return f"elf{bits}-{'big' if big_endian else 'little'}aarch64"
    if kind == "arm":
        return f"elf32-{'big' if big_endian else 'little'}arm"
    if kind == "x86-64":
        return f"elf{bits}-x86-64"
    if kind == "i386" and bits == 32:
        return "elf32-i386"
    if kind == "s390":
        return f"elf{bits}-s390"
    return f"elf{bits}-{'big' if big_endian else 'little'}"


def read_file_header(data: Buffer, path: str) -> FileHeader:
    """The ELF header of ``data``, its tables checked to lie inside ``data``."""
    size = len(data)
    if not is_elf(data):
        raise ElfError(path, "file format not recognized (not an ELF file)", 0)
    if size < IDENT_SIZE:
        raise ElfError(path, f"truncated ELF identification ({size} of 16 bytes)", 0)
    if data[4] not in (1, 2):
        raise ElfError(path, f"invalid ELF class {data[4]}", 4)
    if data[5] not in (1, 2):
        raise ElfError(path, f"invalid ELF data encoding {data[5]}", 5)
    layout = LAYOUTS[(data[4] == 2, data[5] == 2)]
    header_size = IDENT_SIZE + layout.file_header.size
    if size < header_size:
        raise ElfError(path, f"truncated ELF header ({size} of {header_size} bytes)", 0)
    (e_type, machine, _, entry, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
     shstrndx) = layout.file_header.unpack_from(data, IDENT_SIZE)
    fields_at = 0x36 if layout.wide else 0x2A  # where e_phentsize sits
    if shoff:
        expected = layout.section.size
        if shentsize != expected:
            raise ElfError(path, f"bad section header entry size {shentsize} (expected "
                           f"{expected})", fields_at + 4)
        if shoff + expected > size:
            raise ElfError(path, "truncated ELF section header table", shoff)
        section0 = layout.section.unpack_from(data, shoff)
        if shnum == 0:
            shnum = section0[5]
        if shstrndx == SHN_XINDEX:
            shstrndx = section0[6]
        if phnum == PN_XNUM:
            phnum = section0[7]
        if shoff + shnum * expected > size:
            raise ElfError(path, f"truncated ELF section header table ({shnum} entries)", shoff)
        if shnum and shstrndx >= shnum:
            raise ElfError(path, f"bad section name string table index {shstrndx}",
                           fields_at + 8)
        if shnum:
            names = layout.section.unpack_from(data, shoff + shstrndx * expected)
            if names[4] + names[5] > size:
                raise ElfError(path, f"section name string table (section {shstrndx}) runs "
                               f"past the end of the file ({size:#x} bytes)", names[4])
    else:
        shnum = shstrndx = 0
    if phoff and phnum:
        if phentsize != layout.segment.size:
            raise ElfError(path, f"bad program header entry size {phentsize} (expected "
                           f"{layout.segment.size})", fields_at)
        if phoff + phnum * phentsize > size:
            raise ElfError(path, f"truncated ELF program header table ({phnum} entries)", phoff)
    else:
        phnum = 0
    return FileHeader(layout, e_type, machine, entry, phoff, shoff, phentsize, phnum,
                      shentsize, shnum, shstrndx)


def read_section_headers(data: Buffer, header: FileHeader) -> list[SectionHeader]:
    """Every section header (checked in :func:`read_file_header`), names resolved; a name
    offset outside the name table gives the name ``""``."""
    if not header.shnum:
        return []
    layout = header.layout.section
    rows = [layout.unpack_from(data, header.shoff + i * layout.size)
            for i in range(header.shnum)]
    names_at, names_size = rows[header.shstrndx][4], rows[header.shstrndx][5]
    names = bytes(data[names_at:names_at + names_size])
    out = []
    for index, (sh_name, kind, flags, address, offset, size, link, info, _, entsize) in \
            enumerate(rows):
        end = names.find(b"\0", sh_name)
        name = names[sh_name:end].decode("utf-8", "replace") if end >= 0 else ""
        out.append(SectionHeader(index, name, kind, flags, address, offset, size, link, info,
                                 entsize))
    return out


def read_program_headers(data: Buffer, header: FileHeader) -> list[ProgramHeader]:
    """Every program header (checked in :func:`read_file_header`)."""
    layout = header.layout
    out = []
    for index in range(header.phnum):
        entry = layout.segment.unpack_from(data, header.phoff + index * layout.segment.size)
        if layout.wide:   # p_type p_flags p_offset p_vaddr p_paddr p_filesz p_memsz p_align
            kind, flags, offset, vaddr, _, filesz, memsz, _ = entry
        else:             # p_type p_offset p_vaddr p_paddr p_filesz p_memsz p_flags p_align
            kind, offset, vaddr, _, filesz, memsz, flags, _ = entry
        out.append(ProgramHeader(kind, flags, offset, vaddr, filesz, memsz))
    return out


def iter_notes(data: Buffer, start: int, size: int, big_endian: bool) -> Iterator[Note]:
    """The notes in ``data[start:start + size]`` (clipped to ``data``); stops at the first
    note that does not fit."""
    note = LAYOUTS[(False, big_endian)].note
    position, end = start, min(start + size, len(data))
    while position + note.size <= end:
        name_size, desc_size, kind = note.unpack_from(data, position)
        name_at = position + note.size
        desc_at = name_at + ((name_size + 3) & ~3)
        following = desc_at + ((desc_size + 3) & ~3)
        if following > end or following <= position:
            return
        name = bytes(data[name_at:name_at + name_size]).rstrip(b"\0")
        yield Note(name, kind, desc_at, desc_size)
        position = following


def note_areas(data: Buffer, header: FileHeader,
               sections: list[SectionHeader] | None = None) -> list[tuple[int, int]]:
    """(offset, size) of the note areas: SHT_NOTE sections, or PT_NOTE segments when the
    file has no section headers."""
    if sections is None:
        sections = read_section_headers(data, header)
    if sections:
        return [(s.offset, s.size) for s in sections if s.type == SHT_NOTE]
    return [(p.offset, p.filesz) for p in read_program_headers(data, header)
            if p.type == PT_NOTE]


def find_build_id(data: Buffer, areas: list[tuple[int, int]], big_endian: bool) -> bytes | None:
    """The descriptor of the first GNU NT_GNU_BUILD_ID note in ``areas``, or ``None``."""
    for start, size in areas:
        for note in iter_notes(data, start, size, big_endian):
            if note.type == NT_GNU_BUILD_ID and note.name == b"GNU":
                return bytes(data[note.desc_offset:note.desc_offset + note.desc_size])
    return None
