"""The ELF files inside what ``sframe audit`` is given: a file itself, the members of a
static archive (``ar``), or the files of a Debian package (an ``ar`` of a compressed tar).

``ar`` is read by :mod:`pysframe.elf.archive`; tar by the standard library. Every size is checked
against the data, decompression is bounded (:data:`MAX_UNPACKED`), and only regular files
of a package are read; names are used as labels, never as paths to open.
"""

from __future__ import annotations

import gzip
import io
import lzma
import mmap
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from ..elf.archive import AR_MAGIC, THIN_MAGIC, ArchiveError, named_members, read_members
from ..errors import PysframeError

ELF_MAGIC = b"\x7fELF"
#: What a package may unpack to before the rest of it is left out (streamed: this much
#: is read through, never held).
MAX_UNPACKED = 1 << 30
#: A member larger than this is left out (it is read into memory to be judged).
MAX_MEMBER = 256 << 20
#: Tar members read per package before the rest is left out (a header costs ~40 us).
MAX_MEMBERS = 100_000


@dataclass(frozen=True, slots=True)
class Damage:
    """What could not be read of an archive or package: its judgement, in one line."""

    message: str


Contents = bytes | mmap.mmap | Damage


def members(data: bytes | mmap.mmap, path: str = "") -> Iterator[tuple[str, Contents]]:
    """(label suffix, bytes) of every file to judge in ``data`` (the file at ``path``):
    ``""`` and the data itself for a plain file; ``"(name)"`` per ELF member of an archive
    (a thin archive's members read from their own files, as objdump reads them) or
    package; and ``Damage`` where the rest of an archive or package cannot be read (what
    came before is kept), or a thin archive's member."""
    if data[:len(THIN_MAGIC)] == THIN_MAGIC:
        yield from _thin_members(path, data)
        return
    if data[:len(AR_MAGIC)] != AR_MAGIC:
        yield "", data
        return
    entries: list[tuple[str, bytes]] = []
    damage = None
    try:
        entries.extend(named_members(data))
    except ArchiveError as error:
        damage = Damage(f"damaged archive: {error}")
    if any(name == "debian-binary" for name, _ in entries):
        for name, contents in entries:
            if name.startswith("data.tar"):
                yield from _package_files(name, contents)
    else:
        yield from ((f"({name})", contents) for name, contents in entries
                    if contents.startswith(ELF_MAGIC))
    if damage is not None:
        yield "", damage


def _thin_members(path: str, data: bytes | mmap.mmap) -> Iterator[tuple[str, Contents]]:
    """The ELF members of the thin archive at ``path``: files of their own."""
    try:
        for member, contents in read_members(path, data):
            if isinstance(contents, PysframeError):
                yield f"({member.name})", Damage(contents.message)
            elif contents[:len(ELF_MAGIC)] == ELF_MAGIC:
                yield f"({member.name})", contents
    except ArchiveError as error:
        yield "", Damage(f"damaged archive: {error}")


def _package_files(name: str, compressed: bytes) -> Iterator[tuple[str, Contents]]:
    """The ELF regular files of a package's data tarball, streamed from the decompressor:
    bounded in unpacked bytes, in members and in member size."""
    try:
        stream = _Bounded(_decompressing(name, compressed), MAX_UNPACKED)
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for count, member in enumerate(_each(archive)):
                if count >= MAX_MEMBERS:
                    yield f"({name})", Damage(f"{name}: more than {MAX_MEMBERS:,} members; "
                                              "the rest left out")
                    return
                if not member.isreg() or member.size > MAX_MEMBER:
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                head = handle.read(4)
                if head == ELF_MAGIC:
                    yield f"({member.name.removeprefix('./')})", head + handle.read()
    except _TooLarge:
        yield f"({name})", Damage(f"{name}: unpacks to more than {MAX_UNPACKED >> 20:,} MiB; "
                                  "the rest left out")
    except (tarfile.TarError, lzma.LZMAError, zlib.error, OSError, EOFError, ValueError,
            MemoryError) as error:
        yield f"({name})", Damage(f"{name}: damaged ({error})")


def _each(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members of a streamed tar, not kept (tarfile keeps every TarInfo it reads)."""
    while True:
        member = archive.next()
        if member is None:
            return
        archive.members.clear()  # type: ignore[attr-defined]  # (untyped in typeshed)
        yield member


class _TooLarge(PysframeError):
    """A package unpacks to more than it may."""

    def __init__(self) -> None:
        super().__init__("unpacks to more than it may")


class _Bounded(io.RawIOBase):
    """A stream that raises :class:`_TooLarge` once more than ``limit`` bytes are read."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._stream, self._left = stream, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._stream.read(min(len(buffer), self._left + 1))
        if len(data) > self._left:
            raise _TooLarge
        self._left -= len(data)
        buffer[:len(data)] = data
        return len(data)


def _decompressing(name: str, data: bytes) -> IO[bytes]:
    """A stream of the decompressed ``data`` (by the member's name)."""
    raw = io.BytesIO(data)
    if name.endswith(".xz"):
        return lzma.open(raw)
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw)
    return raw
