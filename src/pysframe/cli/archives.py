"""The files a command-line path stands for, as objdump reads them: the file itself, or
each member of a static archive (``ar``, thin or not), named ``lib.a(member.o)`` in
messages as binutils names them."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import NamedTuple

from ..elf.archive import THIN_MAGIC, ArchiveError, is_archive, read_members, thin_member_path
from ..errors import PysframeError


class Input(NamedTuple):
    """One file to read: how messages name it (the path, or ``lib.a(cfi.o)``), how
    objdump's ``file format`` line shows it (the path; a member's name; a thin archive's
    member by its path), and its bytes."""

    label: str
    shown: str
    data: bytes | mmap.mmap


def each_input(path: str, data: bytes | mmap.mmap) -> Iterator[Input | PysframeError]:
    """The file at ``path`` (bytes ``data``), or each member of the archive it is; a
    member that cannot be read, and damage that ends the archive, as one-line errors
    naming the member or the archive (and the offset)."""
    if not is_archive(data):
        yield Input(path, path, data)
        return
    thin = data[:len(THIN_MAGIC)] == THIN_MAGIC
    try:
        for member, contents in read_members(path, data):
            label = f"{path}({member.name})"
            if isinstance(contents, PysframeError):
                yield PysframeError(contents.message, path=label, unreadable=True)
            elif is_archive(contents):
                yield PysframeError("an archive inside an archive is not read", path=label)
            else:
                shown = thin_member_path(path, member.name) if thin else member.name
                yield Input(label, shown, contents)
    except ArchiveError as error:
        yield PysframeError(error.message, path=path)
