"""Rewriting a 64-bit little-endian ELF file the way ``upgrade`` and ``strip`` do: the
section header table read into editable rows, new contents and a new table appended at
the end (nothing already in the file moves), ``e_shoff`` and the counts pointed at it."""

from __future__ import annotations

import struct

from .errors import GenerateError

#: Elf64_Shdr: name, type, flags, address, offset, size, link, info, alignment, entry size.
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
OFFSET, SIZE, LINK, INFO = 4, 5, 6, 7


def section_rows(data: bytes | bytearray) -> tuple[list[list[int]], int]:
    """The section headers as editable rows, and ``e_shstrndx``."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shnum == 0 or shentsize != SECTION_HEADER.size or (
            shoff + shnum * shentsize > len(data)):
        raise GenerateError("no usable section header table")
    return [list(SECTION_HEADER.unpack_from(data, shoff + i * shentsize))
            for i in range(shnum)], shstrndx


def append(data: bytearray, blob: bytes, alignment: int = 8) -> int:
    """Append ``blob`` (aligned); returns its file offset."""
    data += bytes(-len(data) % alignment)
    at = len(data)
    data += blob
    return at


def write_rows(data: bytearray, rows: list[list[int]], shstrndx: int) -> None:
    """Append ``rows`` as the file's section header table."""
    at = append(data, b"".join(SECTION_HEADER.pack(*row) for row in rows))
    struct.pack_into("<Q", data, 0x28, at)
    struct.pack_into("<HHH", data, 0x3A, SECTION_HEADER.size, len(rows), shstrndx)
