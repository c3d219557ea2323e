"""The ELF files inside what ``sframe audit`` is given: a file itself, the members of a
static archive (``ar``), or the files of a Debian package (an ``ar`` of a compressed tar).

``ar`` is read by :mod:`pysframe.elf.archive`; tar by the standard library. Every size is checked
against the data, decompression is bounded (:data:`MAX_UNPACKED`), and only regular files
of a package are read; names are used as labels, never as paths to open.
"""

from __future__ import annotations

import io
import lzma
import mmap
import tarfile
import zlib
from collections.abc import Iterator

from ..elf.archive import AR_MAGIC, ArchiveError, named_members

ELF_MAGIC = b"\x7fELF"
#: What a package may unpack to before the rest of it is left out.
MAX_UNPACKED = 4 << 30
#: A member larger than this is left out.
MAX_MEMBER = 1 << 30


def members(data: bytes | mmap.mmap) -> Iterator[tuple[str, bytes | mmap.mmap]]:
    """(label suffix, bytes) of every file to judge in ``data``: ``""`` and the data
    itself for a plain file; ``"(name)"`` per ELF member of an archive or package."""
    if data[:len(AR_MAGIC)] != AR_MAGIC:
        yield "", data
        return
    entries = list(ar_members(data))
    names = [name for name, _ in entries]
    if "debian-binary" in names:
        for name, contents in entries:
            if name.startswith("data.tar"):
                yield from _package_files(name, contents)
        return
    for name, contents in entries:
        if contents.startswith(ELF_MAGIC):
            yield f"({name})", contents


def ar_members(data: bytes | mmap.mmap) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each file of an ``ar`` archive; a damaged member ends the listing
    (what came before it is kept)."""
    try:
        yield from named_members(data)
    except ArchiveError:
        return


def _package_files(name: str, compressed: bytes) -> Iterator[tuple[str, bytes]]:
    """The ELF regular files of a package's data tarball (decompressed within bounds)."""
    try:
        unpacked = _decompress(name, compressed)
        with tarfile.open(fileobj=io.BytesIO(unpacked), mode="r:") as archive:
            for member in archive:
                if not member.isreg() or member.size > MAX_MEMBER:
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                head = handle.read(4)
                if head != ELF_MAGIC:
                    continue
                yield f"({member.name.removeprefix('./')})", head + handle.read()
    except (tarfile.TarError, lzma.LZMAError, zlib.error, OSError, EOFError, ValueError):
        return


def _decompress(name: str, data: bytes) -> bytes:
    if name.endswith(".xz"):
        decompressor = lzma.LZMADecompressor()
        out = decompressor.decompress(data, max_length=MAX_UNPACKED)
    elif name.endswith(".gz"):
        out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, MAX_UNPACKED)
    elif name.endswith(".zst"):
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
        out = reader.read(MAX_UNPACKED)
    else:
        out = data
    return out
