"""The SFrame sections of a linked file without building an :class:`~pysframe.elf.ElfImage`,
for the start-up-bound ``sframe dump``.

pyelftools takes 21 ms to import and about 30 ms to open a large file, an eighth of a
whole 100,000-function dump, so this reads only the headers (:mod:`.headers`). Anything
it does not handle (relocatable objects, whose dumps need relocations; files without
section headers; anything odd) returns ``None`` and the caller uses the careful path.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

from .headers import (
    ET_REL,
    SHT_GNU_SFRAME,
    SHT_PROGBITS,
    ElfError,
    read_file_header,
    read_section_headers,
    target_name,
)


@dataclass(slots=True, frozen=True)
class QuickSection:
    name: str
    address: int
    file_offset: int
    raw: bytes


def quick_sframe_sections(data: bytes | mmap.mmap, name: str = ".sframe"
                          ) -> tuple[str, list[QuickSection]] | None:
    """(target name, SFrame sections) of a linked ELF file, or ``None`` to use the careful
    path (:class:`~pysframe.elf.ElfImage`), which also gives the precise error."""
    try:
        header = read_file_header(data, "")
    except ElfError:
        return None
    if header.type == ET_REL or not header.shnum:
        return None
    found = []
    for section in read_section_headers(data, header):
        if section.name != name:
            continue
        if not (section.type == SHT_GNU_SFRAME
                or (section.type == SHT_PROGBITS and name == ".sframe")):
            continue
        if section.offset + section.size > len(data):
            return None  # let the careful path report it
        found.append(QuickSection(name, section.address, section.offset,
                                  data[section.offset:section.offset + section.size]))
    return target_name(header.machine, 2 if header.layout.wide else 1, header.big_endian), found
