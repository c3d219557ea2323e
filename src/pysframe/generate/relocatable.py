"""``inject`` for relocatable objects (``.o``): the ``.sframe`` section and its
``.rela.sframe`` that ``as --gsframe`` would have written, so that ld links them.

What gas writes (gas 2.47.50 ``--gsframe``, checked on x86-64, AArch64 and s390x; see
:mod:`pysframe.elf.relocations`): one SFrame section per object, ``SHT_GNU_SFRAME``,
``SHF_ALLOC``, 8-aligned, flags ``SFRAME_F_FDE_FUNC_START_PCREL`` only (FDEs in source
order, not sorted), V3 (s390x: zero-padded to a multiple of 8 bytes); each FDE's start field stored as 0 with one ``R_*_PC64`` (V3) or
``R_*_PC32`` (V2) relocation against the function's text section symbol, the function's
offset in the addend; ``.rela.sframe`` (``SHF_INFO_LINK``, linked to ``.symtab``) right
after it. Functions in several text sections (``-ffunction-sections``,
``.text.unlikely``, COMDAT groups) are all described by the one section, each through its
relocation; ld drops the FDEs of discarded sections.

Which function each CFI FDE covers comes from the same place: the relocation of the FDE's
``pc_begin`` field in ``.eh_frame`` (or ``.debug_frame``), against the section symbol
(what gas writes) or another local symbol of an executable section. Its symbol and addend
are reused as they are, so the symbol table is not touched. The rows are gas's for each
function (:func:`.section.translate_entry`), FDEs in CFI order as gas emits them.

Refused in one line, the file untouched: objects that already have SFrame, have no CFI,
whose CFI cannot be read, or whose FDEs name their function in a way gas never writes
(no relocation, an unknown type, a global or undefined symbol, a function outside its
section). Like ``inject`` for linked files, the new contents, the section-name table and
the section header table are appended; nothing already in the file moves.
"""

from __future__ import annotations

import struct

from ..cfi.eh_frame import parse_debug_frame, parse_eh_frame
from ..elf import ElfImage
from ..elf.headers import (
    LAYOUTS,
    SHF_EXECINSTR,
    SHT_GNU_SFRAME,
    SHT_RELA,
    SHT_SYMTAB,
    SectionHeader,
)
from ..elf.relocations import (
    SHF_ALLOC,
    SHN_LORESERVE,
    START_FIELD_TYPES,
    Relocation,
    Symbol,
    read_relocations,
    read_symbols,
    relocation_tables,
)
from ..format.constants import (
    ABI,
    F_FDE_FUNC_START_PCREL,
    FDE_SIZE,
    HEADER_SIZE,
    VERSION_2,
    VERSION_3,
)
from ..format.encode import encode
from ..format.model import FDE, Section
from .errors import GenerateError
from .section import Generated, abi_of, translate_entry

SHF_INFO_LINK = 0x40
#: Relocation types whose value is S + A (absolute) or S + A - P (PC-relative), of the
#: width a CFI pointer has: a pc_begin relocated by one of them starts the function at S + A.
_POINTER_TYPES = {"EM_X86_64": {1, 2, 10, 11, 24}, "EM_AARCH64": {257, 258, 260, 261},
                  "EM_S390": {4, 5, 22, 23}}


def inject_relocatable(image: ElfImage, *, version: int = VERSION_3, name: str = ".sframe",
                       as_gnu: bool = False) -> tuple[bytes, int]:
    """The bytes of the object ``image`` with the SFrame section gas would have written and
    its relocations, and the section's size."""
    if image.elf_class != 64:
        raise GenerateError("SFrame describes 64-bit objects only")
    if version not in (VERSION_2, VERSION_3):
        raise GenerateError(f"cannot generate SFrame version {version} (2 or 3)")
    abi = abi_of(image)
    if image.sframe_sections():
        raise GenerateError("the file already has an SFrame section")
    headers = image.section_headers()
    if image.header.shnum == 0 or len(headers) + 2 >= SHN_LORESERVE:
        raise GenerateError("too many sections to add two (extended section numbering)")
    result, starts = _generated(image, abi, version, as_gnu)
    sframe = bytearray(encode(result.section))
    if image.machine == "EM_S390":
        sframe += bytes(-len(sframe) % 8)  # gas on s390x pads sections to their alignment
    width = 8 if version == VERSION_3 else 4
    kind = START_FIELD_TYPES[(image.machine, width)]
    rela = LAYOUTS[(True, image.big_endian)].rela
    table = bytearray()
    for i, (symbol, addend) in enumerate(starts):
        at = HEADER_SIZE + i * FDE_SIZE[version]
        sframe[at:at + width] = bytes(width)  # gas: 0, the value is in the addend
        table += rela.pack(at, (symbol << 32) | kind, addend)
    symtab = _symbol_table_of(image, headers)
    return _appended(image, bytes(sframe), bytes(table), name, symtab), len(sframe)


def _generated(image: ElfImage, abi: ABI, version: int, as_gnu: bool
               ) -> tuple[Generated, list[tuple[int, int]]]:
    """The section (FDEs in CFI order, the start fields still to be zeroed) and the
    (symbol, addend) naming each FDE's function."""
    cfi = _cfi_section(image)
    found = image.section(cfi.name, relocated=True)
    assert found is not None
    data = found[0]
    parse = parse_debug_frame if cfi.name == ".debug_frame" else parse_eh_frame
    cfi_fdes, errors = parse(data, 0, big_endian=image.big_endian, address_size=8)
    if errors:
        raise GenerateError(f"{cfi.name}: {errors[0]}")
    starts = _function_starts(image, cfi)
    headers = image.section_headers()
    symbols = read_symbols(image, _symbol_table_of(image, headers))
    section = Section(version=version, abi=abi, flags=F_FDE_FUNC_START_PCREL,
                      cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0)
    result = Generated(section)
    fdes: list[FDE] = []
    named: list[tuple[int, int]] = []
    for entry in cfi_fdes:
        field = entry.offset + (20 if _is_dwarf64(data, entry.offset) else 8)
        relocation = starts.get(field)
        where = f"{cfi.name} FDE at {entry.offset:#x}"
        if relocation is None:
            raise GenerateError(f"{where}: no relocation names its function")
        start = _start_in_section(image, where, relocation, symbols, headers, entry.pc_range)
        fde = translate_entry(data, 0, entry, abi, image.big_endian, result,
                              version=version, as_gnu=as_gnu, start=start)
        if fde is not None:
            fdes.append(fde)
            named.append((relocation.symbol, relocation.addend))
    section.fdes = fdes
    return result, named


def _cfi_section(image: ElfImage) -> SectionHeader:
    for name in (".eh_frame", ".debug_frame"):
        header = image.section_header(name)
        if header is not None and header.has_contents and header.size:
            return header
    raise GenerateError("no .eh_frame or .debug_frame section: no CFI to describe (gas "
                        "writes no SFrame section for such an object either)")


def _is_dwarf64(data: bytes, offset: int) -> bool:
    return bytes(data[offset:offset + 4]) == b"\xff\xff\xff\xff"


def _function_starts(image: ElfImage, cfi: SectionHeader) -> dict[int, Relocation]:
    """The relocations of the CFI section by offset."""
    found: dict[int, Relocation] = {}
    for table in relocation_tables(image, cfi.number):
        for relocation in read_relocations(image, table):
            found[relocation.offset] = relocation
    return found


def _start_in_section(image: ElfImage, where: str, relocation: Relocation,
                      symbols: list[Symbol], headers: list[SectionHeader], size: int) -> int:
    """The function's offset in its text section, checked to be one gas could name."""
    if relocation.type not in _POINTER_TYPES.get(image.machine, set()):
        raise GenerateError(f"{where}: its start has relocation type {relocation.type}, "
                            "not a pointer gas writes")
    if not 0 < relocation.symbol < len(symbols):
        raise GenerateError(f"{where}: its start names symbol {relocation.symbol} of "
                            f"{len(symbols)}")
    symbol = symbols[relocation.symbol]
    if not symbol.local:
        # A global symbol may be resolved to another object's definition (a weak or
        # COMDAT one): the FDE would then describe someone else's function.
        raise GenerateError(f"{where}: its start names a global symbol ({relocation.symbol}); "
                            "gas names the section")
    if not 0 < symbol.shndx < min(SHN_LORESERVE, len(headers)) or not (
            headers[symbol.shndx].flags & SHF_EXECINSTR):
        raise GenerateError(f"{where}: its function is not in an executable section")
    text = headers[symbol.shndx]
    start = symbol.value + relocation.addend
    if start < 0 or start + size > text.size:
        raise GenerateError(f"{where}: the function [{start:#x}, {start + size:#x}) is not "
                            f"inside {text.name} (size {text.size:#x})")
    return start


def _symbol_table_of(image: ElfImage, headers: list[SectionHeader]) -> int:
    tables = [h.number for h in headers if h.type == SHT_SYMTAB]
    if len(tables) != 1:
        raise GenerateError(f"{len(tables)} symbol tables (a relocatable object has one)")
    return tables[0]


def _appended(image: ElfImage, sframe: bytes, table: bytes, name: str, symtab: int) -> bytes:
    """The file with the two sections, a new section-name table and a new section header
    table appended (``e_shoff``, ``e_shnum`` pointed at them)."""
    layout = LAYOUTS[(True, image.big_endian)]
    data = bytearray(image.data)
    header = image.header
    rows = [list(layout.section.unpack_from(data, header.shoff + i * header.shentsize))
            for i in range(len(image.section_headers()))]
    if header.shentsize != layout.section.size or not 0 < header.shstrndx < len(rows):
        raise GenerateError("the file has no usable section header table to extend")
    names_row = rows[header.shstrndx]
    names = bytes(data[names_row[4]:names_row[4] + names_row[5]])
    sframe_name = len(names)
    rela_name = sframe_name + len(name) + 1
    new_names = names + name.encode() + b"\0" + b".rela" + name.encode() + b"\0"

    def append(blob: bytes, alignment: int) -> int:
        data.extend(bytes(-len(data) % alignment))
        at = len(data)
        data.extend(blob)
        return at

    sframe_index = len(rows)
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    rows.append([sframe_name, SHT_GNU_SFRAME, SHF_ALLOC, 0, append(sframe, 8), len(sframe),
                 0, 0, 8, 0])
    rows.append([rela_name, SHT_RELA, SHF_INFO_LINK, 0, append(table, 8), len(table), symtab,
                 sframe_index, 8, layout.rela.size])
    names_row[4], names_row[5] = append(new_names, 1), len(new_names)
    shoff = append(b"".join(layout.section.pack(*row) for row in rows), 8)
    order = layout.order
    struct.pack_into(order + "Q", data, 0x28, shoff)
    struct.pack_into(order + "H", data, 0x3C, len(rows))
    return bytes(data)
