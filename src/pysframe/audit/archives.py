"""The ELF files inside what ``sframe audit`` is given: a file itself, the members of a
static archive (``ar``), or the files of a Debian package (an ``ar`` of a compressed tar).

Written by hand for ``ar`` (a 60-byte header per member; GNU's ``//`` table of long names):
no maintained library reads it; tar is the standard library's. Every size is checked
against the data, decompression is bounded (:data:`MAX_UNPACKED`), and only regular files
of a package are read; names are used as labels, never as paths to open.
"""

from __future__ import annotations

import io
import lzma
import tarfile
import zlib
from collections.abc import Iterator

AR_MAGIC = b"!<arch>\n"
ELF_MAGIC = b"\x7fELF"
#: What a package may unpack to before the rest of it is left out.
MAX_UNPACKED = 4 << 30
#: A member larger than this is left out.
MAX_MEMBER = 1 << 30


def members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(label suffix, bytes) of every file to judge in ``data``: ``""`` and the data
    itself for a plain file; ``"(name)"`` per ELF member of an archive or package."""
    if not data.startswith(AR_MAGIC):
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


def ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each member of an ``ar`` archive, the symbol and name tables left
    out; a damaged header ends the listing."""
    offset = len(AR_MAGIC)
    long_names = b""
    while offset + 60 <= len(data):
        header = data[offset:offset + 60]
        if header[58:60] != b"`\n":
            return
        try:
            size = int(header[48:58].decode("ascii").strip() or "0")
        except ValueError:
            return
        start = offset + 60
        if size < 0 or start + size > len(data):
            return
        name = header[:16].decode("utf-8", "replace").rstrip()
        contents = data[start:start + size]
        offset = start + size + (size & 1)
        if name == "//":
            long_names = contents
            continue
        if name in ("/", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            continue
        if name.startswith("/") and name[1:].isdigit():
            at = int(name[1:])
            end = long_names.find(b"\n", at)
            name = long_names[at:end if end >= 0 else len(long_names)].decode(
                "utf-8", "replace")
        yield name.rstrip("/"), contents


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
