"""Static archives (``ar``): the members, as the bytes lay them out.

Written by hand: no maintained library reads ``ar``. The format is a magic string, then
per member a 60-byte header (name, dates and modes, a decimal size, a terminator) and the
contents, padded to an even length. Every size is checked against the data; a damaged
header or a member that runs past the end raises :class:`ArchiveError` naming the offset.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

from ..errors import PysframeError
from ..records import record_class

AR_MAGIC = b"!<arch>\n"
HEADER_SIZE = 60
#: The names of the index and name-table members (not files).
SPECIAL = ("/", "//", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED")


class ArchiveError(PysframeError):
    """A damaged archive, at an offset."""


@record_class
class ArMember:
    """One member: its header, where the header starts, and the contents."""

    header: bytes
    offset: int
    contents: bytes

    @property
    def raw_name(self) -> str:
        """The name field as written (``"name/"``, ``"/123"`` into the long names...)."""
        return self.header[:16].decode("utf-8", "replace").rstrip()


def ar_entries(data: bytes | mmap.mmap) -> Iterator[ArMember]:
    """Every member of the archive ``data``, the index and name tables included."""
    if data[:len(AR_MAGIC)] != AR_MAGIC:
        raise ArchiveError("not an ar archive")
    offset = len(AR_MAGIC)
    while offset + HEADER_SIZE <= len(data):
        header = bytes(data[offset:offset + HEADER_SIZE])
        if header[58:60] != b"`\n":
            raise ArchiveError(f"damaged archive member header at offset {offset:#x}")
        try:
            size = int(header[48:58].decode("ascii").strip() or "0")
        except ValueError:
            raise ArchiveError(f"damaged archive member size at offset {offset:#x}") from None
        start = offset + HEADER_SIZE
        if size < 0 or start + size > len(data):
            raise ArchiveError(f"archive member at offset {offset:#x} runs past the end")
        yield ArMember(header, offset, bytes(data[start:start + size]))
        offset = start + size + (size & 1)


def named_members(data: bytes | mmap.mmap) -> Iterator[tuple[str, bytes]]:
    """(name, contents) of each file in the archive (GNU long names resolved; the index
    and name tables left out)."""
    long_names = b""
    for member in ar_entries(data):
        name = member.raw_name
        if name == "//":
            long_names = member.contents
            continue
        if name in SPECIAL:
            continue
        if name.startswith("/") and name[1:].isdigit():
            at = int(name[1:])
            end = long_names.find(b"\n", at)
            name = long_names[at:end if end >= 0 else len(long_names)].decode(
                "utf-8", "replace")
        yield name.rstrip("/"), member.contents
