"""Where ``inject`` puts a linked file's (ET_EXEC, ET_DYN) SFrame section so that it is
loaded and found: in a new read-only ``PT_LOAD`` after every other segment, named by a
``PT_GNU_SFRAME`` program header, as GNU ld would have laid it out, for the readers that
look only there (the kernel's SFrame unwinder registers ``PT_GNU_SFRAME`` at exec,
glibc's ``_dl_find_object`` fills ``dlfo_sframe`` from it).

Nothing already in the file moves. The program header table gets two more entries (one
when it has a ``PT_GNU_SFRAME`` whose section is gone, renamed: that entry is reused): in
place when it has room (``PT_NULL`` entries, such as ``sframe strip`` leaves, or unused
bytes after it inside its segment), else moved to the start of the new segment, as
patchelf does when it must grow the table, with ``e_phoff`` and ``PT_PHDR`` pointed at
the copy (the old table stays, unused). Kernels before 5.18 compute ``AT_PHDR`` as the
first segment's load address plus ``e_phoff`` (``load_elf_binary``), so a moved table's
segment keeps the first segment's offset-to-address distance: its file offset is its
address minus that distance, the file padded with zeros up to it (the size of the
``.bss`` at most; past 16 MiB of zeros the segment follows the file's end instead, and
only Linux 5.18 and later start the program). The ld.so of the program (``AT_PHDR`` minus ``PT_PHDR``'s address is
the load bias, ``rtld.c``) and of a library (the ``PT_LOAD`` holding ``e_phoff``,
``_dl_map_segments``) then find the moved table.

Refused, in one line and with nothing written: files without section headers, not 64-bit,
with an SFrame section already, with segments out of address order, a ``PT_PHDR`` that
is not the table, prelink's undo section, or bytes after everything the headers describe
(an appended payload or signature that would no longer end the file).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import NamedTuple

from ..elf import ElfImage
from ..elf.headers import PT_GNU_SFRAME, PT_LOAD, SHT_GNU_SFRAME, SHT_NOBITS
from .errors import GenerateError

PT_NULL, PT_PHDR, PT_GNU_EH_FRAME = 0, 6, 0x6474E550
PF_R = 4
SHF_ALLOC = 2
SHN_LORESERVE = 0xFF00
SFRAME_ALIGN = 8
PAGE = 0x1000
#: The most zeros added to keep a moved table where kernels before 5.18 look for it.
MAX_PADDING = 16 << 20
#: The kernel reads at most this many bytes of program headers (``load_elf_phdrs``).
MAX_PHDR_BYTES = 0x1000
#: Segments must end below this for a new one to follow (user space on every 64-bit ABI).
ADDRESS_LIMIT = 1 << 62
MAX_ALIGN = 1 << 30


class Segment(NamedTuple):
    """One program header, every field (64-bit order)."""

    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int


class Placement(NamedTuple):
    """Where the new segment, the program header table and the section go."""

    load_offset: int    # file offset of the new PT_LOAD
    load_address: int   # its address
    align: int
    table_moved: bool   # the program header table starts the new segment
    table_offset: int   # e_phoff after the rewrite
    table_slots: int    # entries the table has room for (in place: at least the new count)
    section_offset: int
    section_address: int


def _align(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


def _segments(image: ElfImage) -> list[Segment]:
    header = image.header
    layout = header.layout.segment
    return [Segment(*layout.unpack_from(image.data, header.phoff + i * layout.size))
            for i in range(header.phnum)]


def _refuse_unsafe(image: ElfImage, segments: list[Segment]) -> None:
    """One line saying why ``image`` cannot be rewritten safely, or nothing."""
    if image.elf_class != 64:
        raise GenerateError("only 64-bit ELF files get a loaded SFrame section")
    if not image.section_headers():
        raise GenerateError("the file has no section headers (a loaded section cannot be "
                            "added without them)")
    if image.sframe_sections():
        raise GenerateError("the file already has an SFrame section")
    if sum(s.type == PT_GNU_SFRAME for s in segments) > 1:
        raise GenerateError("the file has more than one PT_GNU_SFRAME program header")
    if image.section_header(".gnu.prelink_undo") is not None:
        raise GenerateError("the file is prelinked (.gnu.prelink_undo): prelink --undo it "
                            "first")
    loads = [s for s in segments if s.type == PT_LOAD]
    if not loads:
        raise GenerateError("the file has no PT_LOAD segment")
    if any(b.vaddr < a.vaddr for a, b in itertools.pairwise(loads)):
        raise GenerateError("the PT_LOAD segments are not in address order")
    for s in loads:
        if s.offset + s.filesz > len(image.data) or s.filesz > s.memsz or \
                s.vaddr + s.memsz > ADDRESS_LIMIT:
            raise GenerateError(f"the PT_LOAD segment at {s.vaddr:#x} is not one the file "
                                "holds and the address space has room after")
        if s.align & (s.align - 1) or s.align > MAX_ALIGN:
            raise GenerateError(f"the PT_LOAD segment at {s.vaddr:#x} has p_align "
                                f"{s.align:#x}")
        if s.align > 1 and (s.offset - s.vaddr) % s.align:
            raise GenerateError(f"the PT_LOAD segment at {s.vaddr:#x} is not aligned as its "
                                f"p_align {s.align:#x} says")
    phdr = [s for s in segments if s.type == PT_PHDR]
    if phdr and (len(phdr) > 1 or phdr[0].offset != image.header.phoff):
        raise GenerateError("PT_PHDR does not describe the program header table")
    end = _described_end(image, segments)
    trailing = bytes(image.data[end:])
    if trailing.strip(b"\0"):
        raise GenerateError(f"{len(trailing)} bytes at the end of the file belong to no "
                            "section or segment (an appended payload or signature would no "
                            "longer end the file)")


def _described_end(image: ElfImage, segments: list[Segment]) -> int:
    """The end of the last byte any header describes."""
    header = image.header
    ends = [header.layout.file_header.size + 16,
            header.phoff + header.phnum * header.phentsize,
            header.shoff + header.shnum * header.shentsize]
    ends += [s.offset + s.size for s in image.section_headers() if s.type != SHT_NOBITS]
    ends += [s.offset + s.filesz for s in segments]
    return max(ends)


def _room_in_place(image: ElfImage, segments: list[Segment], needed: int) -> bool:
    """Whether ``needed`` entries fit at ``e_phoff``: over the table's PT_NULL entries and
    unused bytes after it, inside the segment that loads it, overlapping no section."""
    header = image.header
    start, end = header.phoff, header.phoff + needed * header.phentsize
    if needed <= header.phnum:
        return True
    if any(s.type != SHT_NOBITS and s.size and s.offset < end and start < s.offset + s.size
           for s in image.section_headers()):
        return False
    return any(s.type == PT_LOAD and s.offset <= start and end <= s.offset + s.filesz
               for s in segments)


def place(image: ElfImage, segments: list[Segment], count: int) -> Placement:
    """The layout for a program header table of ``count`` entries and the section."""
    header = image.header
    loads = [s for s in segments if s.type == PT_LOAD]
    # The new segment shares no page with the last one at any page size the linker
    # allowed for (its largest p_align), and ends up last in address order.
    align = max([PAGE, *(s.align for s in loads)])
    highest = _align(max(s.vaddr + s.memsz for s in loads), align)
    end = len(image.data)
    table_bytes = count * header.phentsize
    if _room_in_place(image, segments, count):
        offset = _align(end, align)  # ≡ highest (0) modulo align
        slots = max(count, header.phnum)
        return Placement(offset, highest, align, False, header.phoff, slots, offset, highest)
    if table_bytes > MAX_PHDR_BYTES:
        raise GenerateError(f"{count} program headers are more than the kernel reads")
    distance = loads[0].vaddr - loads[0].offset  # kept: see the module's docstring
    address = max(highest, _align(end, align) + distance)
    offset = address - distance
    if distance < 0 or distance % align or offset - end > MAX_PADDING:
        address, offset = highest, _align(end, align)  # for Linux 5.18 and later only
    section_offset = _align(offset + table_bytes, SFRAME_ALIGN)
    return Placement(offset, address, align, True, offset, count, section_offset,
                     address + section_offset - offset)


def _new_table(segments: list[Segment], load: Segment, sframe: Segment,
               table: tuple[int, int, int] | None) -> list[Segment]:
    """The program headers: PT_NULL entries dropped, the new PT_LOAD after the last one,
    PT_GNU_SFRAME after PT_GNU_EH_FRAME (where ld puts it) or last, ``PT_PHDR`` pointed
    at ``table`` (offset, address, size) when the table moved."""
    out = [s for s in segments if s.type != PT_NULL]
    last_load = max(i for i, s in enumerate(out) if s.type == PT_LOAD)
    out.insert(last_load + 1, load)
    old = [i for i, s in enumerate(out) if s.type == PT_GNU_SFRAME]
    if old:  # an entry whose section is gone (renamed): pointed at the new one
        out[old[0]] = sframe
    else:
        eh_frame = [i for i, s in enumerate(out) if s.type == PT_GNU_EH_FRAME]
        out.insert(eh_frame[0] + 1 if eh_frame else len(out), sframe)
    if table is not None:
        offset, address, size = table
        out = [s._replace(offset=offset, vaddr=address, paddr=address, filesz=size,
                          memsz=size) if s.type == PT_PHDR else s for s in out]
    return out


def inject_loadable(image: ElfImage, build: Callable[[int], bytes], *,
                    name: str = ".sframe") -> tuple[bytes, int]:
    """The bytes of ``image``'s file, and the section's size, with the section ``build(address)`` makes for the
    address it is given, loaded and named by ``PT_GNU_SFRAME`` (see the module's
    docstring)."""
    segments = _segments(image)
    _refuse_unsafe(image, segments)
    header = image.header
    layout = header.layout
    count = sum(1 for s in segments if s.type != PT_NULL) + 1 + (
        not any(s.type == PT_GNU_SFRAME for s in segments))
    where = place(image, segments, count)
    section = build(where.section_address)
    section_end = where.section_offset + len(section)
    load = Segment(PT_LOAD, PF_R, where.load_offset, where.load_address, where.load_address,
                   section_end - where.load_offset, section_end - where.load_offset,
                   where.align)
    sframe = Segment(PT_GNU_SFRAME, PF_R, where.section_offset, where.section_address,
                     where.section_address, len(section), len(section), SFRAME_ALIGN)
    table_bytes = where.table_slots * header.phentsize
    moved = (where.table_offset, where.load_address, table_bytes) if where.table_moved \
        else None
    table = _new_table(segments, load, sframe, moved)
    if not where.table_moved:  # PT_PHDR covers the table as it now is
        table = [s._replace(filesz=table_bytes, memsz=table_bytes) if s.type == PT_PHDR
                 else s for s in table]
    table += [Segment(PT_NULL, 0, 0, 0, 0, 0, 0, 0)] * (where.table_slots - len(table))
    packed = b"".join(layout.segment.pack(*s) for s in table)

    data = bytearray(image.data)
    data += bytes(where.load_offset - len(data))
    if where.table_moved:
        data += packed
    else:
        data[where.table_offset:where.table_offset + len(packed)] = packed
    data += bytes(where.section_offset - len(data))
    data += section
    _append_section_header(image, data, name, where.section_offset, where.section_address,
                           len(section))
    ehdr = struct.Struct(layout.order + "QQ")  # e_phoff, e_shoff (shoff set above)
    shoff = struct.unpack_from(layout.order + "Q", data, 0x28)[0]
    ehdr.pack_into(data, 0x20, where.table_offset, shoff)
    struct.pack_into(layout.order + "H", data, 0x38, len(table))
    return bytes(data), len(section)


def _append_section_header(image: ElfImage, data: bytearray, name: str, offset: int,
                           address: int, size: int) -> None:
    """A new name table and section header table appended, the section's header last."""
    header = image.header
    row = header.layout.section
    order = header.layout.order
    if header.shnum + 1 >= SHN_LORESERVE or struct.unpack_from(order + "H", data, 0x3C)[0] == 0:
        raise GenerateError("the file's section count uses extended numbering")
    rows = [list(row.unpack_from(data, header.shoff + i * row.size))
            for i in range(header.shnum)]
    names_row = rows[header.shstrndx]
    names = bytes(data[names_row[4]:names_row[4] + names_row[5]])
    data += bytes(-len(data) % SFRAME_ALIGN)
    name_index = len(names)
    names += name.encode() + b"\0"
    names_row[4], names_row[5] = len(data), len(names)
    data += names
    data += bytes(-len(data) % SFRAME_ALIGN)
    table_at = len(data)
    # name, type, flags, addr, offset, size, link, info, addralign, entsize
    rows.append([name_index, SHT_GNU_SFRAME, SHF_ALLOC, address, offset, size, 0, 0,
                 SFRAME_ALIGN, 0])
    data += b"".join(row.pack(*fields) for fields in rows)
    struct.pack_into(order + "Q", data, 0x28, table_at)
    struct.pack_into(order + "H", data, 0x3C, len(rows))
