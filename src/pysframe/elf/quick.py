"""A minimal reader of ELF section headers, for the start-up-bound ``sframe dump``.

Hand-written because measurement shows pyelftools is a bottleneck there: it
takes 21 ms to import and about 30 ms to open a large file, an eighth of a whole
100,000-function dump. This reads only the ELF header, the section headers and
the section names, with every offset checked. Anything it does not handle
(relocatable objects, whose dumps need relocations; files without section
headers; extended section numbering; anything odd) returns ``None`` and the
caller uses :class:`pysframe.elf.ElfImage`, which also gives the precise error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SHT_GNU_SFRAME = 0x6FFFFFF4
SHT_PROGBITS = 1
ET_REL = 1

_MACHINES = {62: "x86-64", 3: "i386", 22: "s390", 183: "aarch64", 40: "arm"}


@dataclass(slots=True, frozen=True)
class QuickSection:
    name: str
    address: int
    file_offset: int
    raw: bytes


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


def quick_sframe_sections(data: bytes, name: str = ".sframe"
                          ) -> tuple[str, list[QuickSection]] | None:
    """(target name, SFrame sections) of a linked ELF file, or ``None`` to use pyelftools."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide = data[4] == 2
    order = "<" if data[5] == 1 else ">"
    e_type, machine = struct.unpack_from(order + "HH", data, 16)
    if e_type == ET_REL:
        return None
    if wide:
        shoff = struct.unpack_from(order + "Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x3A)
        header = struct.Struct(order + "IIQQQQIIQQ")
    else:
        shoff = struct.unpack_from(order + "I", data, 0x20)[0]
        shentsize, shnum, shstrndx = struct.unpack_from(order + "HHH", data, 0x2E)
        header = struct.Struct(order + "IIIIIIIIII")
    if (shoff == 0 or shnum == 0 or shentsize != header.size or shstrndx >= shnum
            or shoff + shnum * shentsize > len(data)):
        return None
    sections = [header.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names = sections[shstrndx]
    names_at, names_size = names[4], names[5]
    if names_at + names_size > len(data):
        return None
    found = []
    wanted = name.encode()
    for sh_name, sh_type, _, sh_addr, sh_offset, sh_size, *_ in sections:
        if sh_name >= names_size:
            return None
        end = data.find(b"\0", names_at + sh_name, names_at + names_size)
        if end < 0 or data[names_at + sh_name:end] != wanted:
            continue
        if not (sh_type == SHT_GNU_SFRAME or (sh_type == SHT_PROGBITS and name == ".sframe")):
            continue
        if sh_offset + sh_size > len(data):
            return None  # let the careful path report it
        found.append(QuickSection(name, sh_addr, sh_offset, data[sh_offset:sh_offset + sh_size]))
    return target_name(machine, data[4], order == ">"), found
