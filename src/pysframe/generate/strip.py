"""``sframe strip``: a copy of an ELF file without its SFrame sections, what ld's
``--discard-sframe`` gives at link time.

The section headers of ``.sframe`` (every SFrame section) and of the relocation sections
applying to them are dropped and the rest renumbered: ``e_shstrndx``, ``sh_link`` (and
``sh_info`` of relocation sections), the members of section groups and the symbols'
section indices follow (a symbol of a dropped section becomes absolute). A linked file's
``PT_GNU_SFRAME`` program header becomes ``PT_NULL`` (its bytes stay where the loaded
segment has them: no segment can shrink without moving the code). Written by hand, as
``inject``: the new section header table is appended and nothing else moves but the
symbol tables' index fields, rewritten in place. A static archive is stripped member by
member (:mod:`pysframe.generate.archive`: the symbol index gets the new offsets).
"""

from __future__ import annotations

import struct

from ..elf import ElfImage
from ..elf.headers import SectionHeader
from .archive import rebuild_archive
from .errors import GenerateError
from .inject import SHT_GNU_SFRAME
from .rewrite import section_rows, write_rows

SHT_SYMTAB, SHT_RELA, SHT_REL, SHT_DYNSYM, SHT_GROUP = 2, 4, 9, 11, 17
SHT_SYMTAB_SHNDX = 18
SHN_LORESERVE, SHN_ABS, SHN_XINDEX = 0xFF00, 0xFFF1, 0xFFFF
PT_GNU_SFRAME, PT_NULL = 0x6474E554, 0
_SYMBOL = struct.Struct("<IBBHQQ")


def strip_sframe(image: ElfImage) -> tuple[bytes, int]:
    """The file without its SFrame sections, and how many sections were dropped."""
    sframe = {section.number for section in _sframe_headers(image)}
    if not sframe:
        return bytes(image.data), 0
    if image.elf_class != 64 or image.big_endian:
        raise GenerateError("only 64-bit little-endian files are stripped")
    data = bytearray(image.data)
    headers, shstrndx = section_rows(data)
    shnum = len(headers)
    dropped = sframe | {i for i, h in enumerate(headers)
                        if h[1] in (SHT_RELA, SHT_REL) and h[7] in sframe}
    if shstrndx in dropped:
        raise GenerateError("the section name table is an SFrame section?")
    new_index: dict[int, int] = {}
    for old in range(shnum):
        if old not in dropped:
            new_index[old] = len(new_index)
    kept = []
    for old, header in enumerate(headers):
        if old in dropped:
            continue
        header = list(header)
        if 0 < header[6] < shnum:
            header[6] = new_index.get(header[6], 0)  # sh_link
        if header[1] in (SHT_RELA, SHT_REL) and 0 < header[7] < shnum:
            header[7] = new_index.get(header[7], 0)  # sh_info: the section relocated
        if header[1] in (SHT_SYMTAB, SHT_DYNSYM):
            _renumber_symbols(data, header, new_index)
        elif header[1] == SHT_GROUP:
            _renumber_group(data, header, new_index)
        kept.append(header)
    write_rows(data, kept, new_index[shstrndx])
    _drop_segment(data)
    return bytes(data), len(dropped)


def strip_archive(data: bytes) -> tuple[bytes, int]:
    """The static archive with every member's SFrame sections dropped (other members,
    ELF or not, as they are; the symbol index rewritten for the members' new offsets),
    and how many members changed."""
    def rewrite(name: str, contents: bytes) -> bytes | None:
        if not contents.startswith(b"\x7fELF"):
            return None
        stripped, dropped = strip_sframe(ElfImage(name, contents))
        return stripped if dropped else None

    return rebuild_archive(data, rewrite)


def _sframe_headers(image: ElfImage) -> list[SectionHeader]:
    found: list[SectionHeader] = []
    offsets = {section.file_offset for section in image.sframe_sections()
               if section.found_by != "segment"}
    for header in image.section_headers():
        if header.offset in offsets and header.size and (
                header.name == ".sframe" or header.type == SHT_GNU_SFRAME):
            found.append(header)
    return found


def _table_in_place(data: bytearray, offset: int, size: int, what: str) -> None:
    """A table rewritten in place must lie in the file, aligned, clear of the ELF header
    and of the program and section header tables (a hostile ``sh_offset`` of 1 would
    otherwise have the rewrite overwrite the header it reads next)."""
    if offset % 4 or offset < 64 or offset + size > len(data):
        raise GenerateError(f"{what} at offset {offset:#x} (size {size:#x}) is not where a "
                            "table can be")
    for start, count_at, entry_at in ((0x20, 0x38, 0x36), (0x28, 0x3C, 0x3A)):
        table = struct.unpack_from("<Q", data, start)[0]
        length = struct.unpack_from("<H", data, count_at)[0] * struct.unpack_from(
            "<H", data, entry_at)[0]
        if table < offset + size and offset < table + length:
            raise GenerateError(f"{what} at offset {offset:#x} overlaps the ELF headers")


def _renumber_symbols(data: bytearray, header: list[int], new_index: dict[int, int]) -> None:
    offset, size, entsize = header[4], header[5], header[9] or _SYMBOL.size
    if entsize != _SYMBOL.size:
        raise GenerateError("a symbol table of an unexpected layout")
    _table_in_place(data, offset, size, "a symbol table")
    for at in range(offset, offset + size - size % entsize, entsize):
        name, info, other, shndx, value, length = _SYMBOL.unpack_from(data, at)
        if 0 < shndx < SHN_LORESERVE:
            moved = new_index.get(shndx)
            if moved is None:  # a symbol of a dropped section: keep it, absolute
                shndx, info = SHN_ABS, info & 0xF0
            else:
                shndx = moved
            _SYMBOL.pack_into(data, at, name, info, other, shndx, value, length)
        elif shndx == SHN_XINDEX:
            raise GenerateError("extended section indices (SHN_XINDEX) are not supported")


def _renumber_group(data: bytearray, header: list[int], new_index: dict[int, int]) -> None:
    offset, size = header[4], header[5]
    _table_in_place(data, offset, size, "a section group")
    if size < 4:
        raise GenerateError(f"a section group at offset {offset:#x} is {size} bytes long")
    words = list(struct.unpack_from(f"<{size // 4}I", data, offset))
    members = [new_index[w] for w in words[1:] if w in new_index]
    words = [words[0], *members] + [0] * (len(words) - 1 - len(members))
    struct.pack_into(f"<{len(words)}I", data, offset, *words)
    header[5] = 4 * (1 + len(members))


def _drop_segment(data: bytearray) -> None:
    phoff = struct.unpack_from("<Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    if not phoff or phentsize < 56:
        return
    if phoff + phnum * phentsize > len(data):
        raise GenerateError(f"the program headers at offset {phoff:#x} run past the file")
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", data, at)[0] == PT_GNU_SFRAME:
            struct.pack_into("<I", data, at, PT_NULL)
