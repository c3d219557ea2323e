"""Rebuilding a static archive (``ar``) with some members rewritten, the way ``upgrade`` and
``strip`` do: every member keeps its header but for the size, in its place; the symbol
index (``/``, and ``/SYM64/``) keeps its symbols and gets the members' new offsets (what
``ar s`` would write: the members' symbols do not change). Nothing else of the archive
changes, so ``ar t``, ``nm -s`` and the linker read it as before.

Refused in one line: a thin archive (its members are files of their own, which are not
ours to rewrite), a BSD index (``__.SYMDEF``) when a member changes, an index that
names an offset where no member starts or runs past its own end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ..elf.archive import (
    AR_MAGIC,
    HEADER_SIZE,
    THIN_MAGIC,
    ArchiveError,
    ar_entries,
    archive_files,
)
from ..errors import PysframeError
from .errors import GenerateError

#: Rewrites one member (its name, its bytes): the new bytes, or None to keep it as it is.
Rewrite = Callable[[str, bytes], "bytes | None"]


def rebuild_archive(data: bytes, rewrite: Rewrite) -> tuple[bytes, int]:
    """The archive with each file member passed through ``rewrite``, and how many changed.
    A member's error is named ``(x.o)``: the caller puts the archive's path before it."""
    if data.startswith(THIN_MAGIC):
        raise GenerateError("a thin archive: its members are files of their own; rewrite "
                            "them and run `ar` again")
    try:
        entries = list(ar_entries(data))
        names = {member.offset: member.name for member in archive_files(data)}
    except ArchiveError as error:
        raise GenerateError(str(error)) from None
    changed = 0
    contents: list[bytes] = []
    for entry in entries:
        name = names.get(entry.offset)
        try:
            new = rewrite(name, entry.contents) if name is not None else None
        except PysframeError as error:  # named as binutils name members: lib.a(x.o)
            raise GenerateError(error.message, error.offset, path=f"({name})") from None
        if new is not None and new != entry.contents:
            changed += 1
        contents.append(entry.contents if new is None else new)
    if changed and any(e.raw_name.startswith("__.SYMDEF") for e in entries):
        raise GenerateError("a BSD symbol index (__.SYMDEF) is not rewritten")
    moved: dict[int, int] = {}
    position = len(AR_MAGIC)
    for entry, body in zip(entries, contents, strict=True):
        moved[entry.offset] = position
        position += HEADER_SIZE + len(body) + (len(body) & 1)
    out = bytearray(AR_MAGIC)
    for entry, body in zip(entries, contents, strict=True):
        if entry.raw_name in ("/", "/SYM64/"):
            body = _moved_index(body, moved, entry.raw_name == "/SYM64/", entry.offset)
        size = str(len(body)).encode()
        if len(size) > 10:
            raise GenerateError(f"archive member at offset {entry.offset:#x} would be too "
                                "large for its header")
        out += entry.header[:48] + size.ljust(10) + b"`\n"
        out += body + (b"\n" if len(body) & 1 else b"")
    return bytes(out), changed


def _moved_index(index: bytes, moved: dict[int, int], wide: bool, at: int) -> bytes:
    """The archive's symbol index with each member offset replaced by its new one."""
    width = 8 if wide else 4
    fmt = ">Q" if wide else ">I"
    if len(index) < width:
        raise GenerateError(f"archive symbol index at offset {at:#x} is cut short")
    count = struct.unpack_from(fmt, index)[0]
    if width * (1 + count) > len(index):
        raise GenerateError(f"archive symbol index at offset {at:#x} names {count} symbols, "
                            f"more than its {len(index)} bytes hold")
    out = bytearray(index)
    for i in range(count):
        where = width * (1 + i)
        old = struct.unpack_from(fmt, index, where)[0]
        if old not in moved:
            raise GenerateError(f"archive index at offset {at:#x} names offset {old:#x}, "
                                "where no member starts")
        struct.pack_into(fmt, out, where, moved[old])
    return bytes(out)
