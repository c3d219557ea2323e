"""Static archives (``ar``): the members, as the bytes lay them out.

Written by hand: no maintained library reads ``ar``. The format is a magic string, then
per member a 60-byte header (name, dates and modes, a decimal size, a terminator) and the
contents, padded to an even length. Every size is checked against the data; a damaged
header or a member that runs past the end raises :class:`ArchiveError` naming the offset.

A GNU thin archive (``!<thin>``, ``ar T``) holds only the headers, the symbol index and
the name table: each member is a file of its own, named by its path relative to the
archive's directory (:func:`thin_member_path`, as BFD joins them).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

from ..errors import PysframeError
from ..inputs import InputError, load
from ..records import record_class

AR_MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER_SIZE = 60
#: The names of the index and name-table members (not files).
SPECIAL = ("/", "//", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED")
_SPECIAL_BYTES = tuple(name.encode() for name in SPECIAL)


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


@record_class
class ArFile:
    """One file of an archive: its name (long names resolved, the trailing ``/`` gone),
    where its header starts, and its contents (``None`` in a thin archive: the member is
    the file :func:`thin_member_path` names)."""

    name: str
    offset: int
    contents: bytes | None


def is_archive(data: bytes | mmap.mmap) -> bool:
    """Whether ``data`` starts as an ``ar`` archive, thin or not."""
    return data[:len(AR_MAGIC)] in (AR_MAGIC, THIN_MAGIC)


def ar_entries(data: bytes | mmap.mmap) -> Iterator[ArMember]:
    """Every member of the archive ``data``, the index and name tables included (in a
    thin archive the files' contents are empty: they are not in it)."""
    magic = data[:len(AR_MAGIC)]
    if magic not in (AR_MAGIC, THIN_MAGIC):
        raise ArchiveError("not an ar archive")
    thin = magic == THIN_MAGIC
    offset = len(AR_MAGIC)
    while offset + HEADER_SIZE <= len(data):
        header = bytes(data[offset:offset + HEADER_SIZE])
        if header[58:60] != b"`\n":
            raise ArchiveError(f"damaged archive member header at offset {offset:#x}")
        size_field = header[48:58].decode("ascii", "replace").strip() or "0"
        if not size_field.isdigit():
            raise ArchiveError(f"damaged archive member size at offset {offset:#x}")
        size = int(size_field)
        start = offset + HEADER_SIZE
        if thin and header[:16].rstrip() not in _SPECIAL_BYTES:
            yield ArMember(header, offset, b"")  # the file is elsewhere
            offset = start
            continue
        if start + size > len(data):
            raise ArchiveError(f"archive member at offset {offset:#x} runs past the end")
        yield ArMember(header, offset, bytes(data[start:start + size]))
        offset = start + size + (size & 1)
    if offset != len(data):
        raise ArchiveError(f"archive member header at offset {offset:#x} is cut short")


def archive_files(data: bytes | mmap.mmap) -> Iterator[ArFile]:
    """The files of the archive ``data`` in order, without the index and name tables."""
    thin = data[:len(THIN_MAGIC)] == THIN_MAGIC
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
            if at >= len(long_names):
                raise ArchiveError(f"archive member name at offset {member.offset:#x} points "
                                   "past the name table")
            end = long_names.find(b"\n", at)
            name = long_names[at:end if end >= 0 else len(long_names)].decode(
                "utf-8", "replace")
        yield ArFile(name.rstrip("/"), member.offset, None if thin else member.contents)


def thin_member_path(archive: str, name: str) -> str:
    """The path of a thin archive's member ``name``, as BFD makes it: an absolute name as
    it is, else the archive's directory joined to it as text (``sub/../x.o``)."""
    if name.startswith("/"):
        return name
    directory = archive.rpartition("/")[0]
    return f"{directory}/{name}" if directory else name


def read_members(archive: str, data: bytes | mmap.mmap
                 ) -> Iterator[tuple[ArFile, bytes | mmap.mmap | InputError]]:
    """Each file of the archive at ``archive`` (its bytes ``data``) with its contents, a
    thin archive's read from the member's own file (a regular file; one that cannot be
    read gives its :class:`~pysframe.inputs.InputError` in place of the contents). A
    damaged archive raises :class:`ArchiveError` after the members before the damage."""
    for member in archive_files(data):
        if member.contents is not None:
            yield member, member.contents
            continue
        try:
            yield member, load(thin_member_path(archive, member.name), min_size=0)
        except InputError as error:
            yield member, error


def named_members(data: bytes | mmap.mmap) -> Iterator[tuple[str, bytes]]:
    """(name, contents) of each file in the (not thin) archive (GNU long names resolved;
    the index and name tables left out)."""
    for member in archive_files(data):
        yield member.name, member.contents or b""
