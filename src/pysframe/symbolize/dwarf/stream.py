"""The sections of one ELF file as the DWARF reader sees them: the section table (read
from an mmap of the file, so only the headers are touched) and each section's contents
as a stream, decompressed (``SHF_COMPRESSED`` zlib or zstd, or a ``.zdebug_*`` section)
only as far as it is read."""

from __future__ import annotations

import io
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...elf.headers import (
    SHF_COMPRESSED,
    SHT_NOBITS,
    SectionHeader,
    find_build_id,
    read_file_header,
    read_section_headers,
)
from ...errors import PysframeError
from ...inputs import open_regular

ELFCOMPRESS_ZLIB = 1
ELFCOMPRESS_ZSTD = 2
MAX_SECTION = 1 << 31           # refuse to read a section of more than 2 GiB
_MAX_SECTIONS = 1 << 20         # a section count beyond this is taken for garbage
#: Decompression is bounded by what the compressed bytes can plausibly hold: DWARF
#: compresses 3-10 times with zlib or zstd, so a section declaring more than this many
#: times its compressed size is refused before anything is inflated (a few KB that
#: inflate to gigabytes of zeros are a bomb, not debug info) ...
MAX_RATIO = 64
#: ... and by a cap for all the sections of one file.
MAX_INFLATED_PER_FILE = 1 << 30


@dataclass(slots=True)
class SectionTable:
    """The section headers of one ELF file (nothing else is read)."""

    path: str
    little: bool
    wide: bool
    sections: dict[str, SectionHeader]
    #: Bytes the file's compressed sections were allowed to inflate to so far.
    inflated: int = 0

    def has_dwarf(self) -> bool:
        for name in (".debug_info", ".zdebug_info"):
            section = self.sections.get(name)
            if section is not None and section.type != SHT_NOBITS and section.size > 0:
                return True
        return False

    def read(self, name: str) -> bytes | None:
        """The contents of section ``name`` (decompressed), or None when absent."""
        stream = self.stream(name)
        return stream.contents() if stream is not None else None

    def stream(self, name: str) -> Stream | None:
        """Section ``name`` as a stream (a compressed one is inflated as far as it is
        read), or None when absent."""
        section = self.sections.get(name)
        compressed_name = False
        if section is None and name.startswith(".debug_"):
            section = self.sections.get(".zdebug_" + name[len(".debug_"):])
            compressed_name = True
        if section is None or section.type == SHT_NOBITS:
            return None
        if section.size > MAX_SECTION:
            raise ValueError(f"{name}: section too large")
        data = _read_section(self.path, section)
        if section.flags & SHF_COMPRESSED:
            return self._compressed(name, data)
        if compressed_name and data[:4] == b"ZLIB":
            if len(data) < 12:
                raise ValueError(f"{name}: truncated compression header")
            size = int.from_bytes(data[4:12], "big")
            self._allow(name, len(data), size)
            return Stream(name, data, 12, size)
        return Stream(name, data)

    def _allow(self, name: str, compressed: int, size: int) -> None:
        """Refuse to inflate ``compressed`` bytes to a declared ``size`` beyond the bounds."""
        if size > MAX_RATIO * compressed + 4096:
            raise ValueError(f"{name}: declares {size} bytes from {compressed} compressed "
                             f"(more than {MAX_RATIO} times: not inflated)")
        if self.inflated + size > MAX_INFLATED_PER_FILE:
            raise ValueError(f"{name}: the file's sections would inflate to more than "
                             f"{MAX_INFLATED_PER_FILE} bytes")
        self.inflated += size

    def _compressed(self, name: str, data: bytes) -> Stream:
        """An SHF_COMPRESSED section: its Elf32_Chdr / Elf64_Chdr, then the data."""
        order = "<" if self.little else ">"
        if self.wide:
            kind, _, size, _ = struct.unpack_from(order + "IIQQ", data, 0)
            start = 24
        else:
            kind, size, _ = struct.unpack_from(order + "III", data, 0)
            start = 12
        if kind in (ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD):
            self._allow(name, len(data) - start, size)
        if kind == ELFCOMPRESS_ZLIB:
            return Stream(name, data, start, size)
        if kind == ELFCOMPRESS_ZSTD:
            return Stream(name, _unzstd(name, data[start:], size))
        raise ValueError(f"{name}: unknown compression type {kind}")

    def note_build_id(self) -> bytes | None:
        """The GNU build id note of ``.note.gnu.build-id``, if any."""
        data = self.read(".note.gnu.build-id")
        if not data:
            return None
        return find_build_id(data, [(0, len(data))], not self.little) or None

    def debuglink(self) -> str | None:
        data = self.read(".gnu_debuglink")
        if not data:
            return None
        name = data.split(b"\0", 1)[0]
        return os.fsdecode(name) if name and b"/" not in name else None


def _read_section(path: str, section: SectionHeader) -> bytes:
    """The stored bytes of ``section`` (a regular file only; bounded by the section)."""
    fd, status = open_regular(path)
    try:
        if section.offset + section.size > status.st_size:
            raise ValueError(f"{section.name}: truncated section")
        data = os.pread(fd, section.size, section.offset)
    finally:
        os.close(fd)
    if len(data) != section.size:
        raise ValueError(f"{section.name}: truncated section")
    return data


def read_section_table(path: str) -> SectionTable | None:
    """The section headers of ``path``, or None when it is not a readable ELF file with
    section headers."""
    try:
        fd, _ = open_regular(path)
        try:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
                header = read_file_header(data, path)
                if not 0 < header.shnum <= _MAX_SECTIONS:
                    return None
                rows = read_section_headers(data, header)
        finally:
            os.close(fd)
    except (OSError, ValueError, struct.error, PysframeError):
        return None
    if rows[header.shstrndx].size > MAX_SECTION:
        return None
    sections: dict[str, SectionHeader] = {}
    for row in rows:
        sections.setdefault(row.name, row)
    return SectionTable(path, not header.big_endian, header.layout.wide, sections)


def _unzstd(name: str, data: bytes, size: int) -> bytes:
    if size > MAX_SECTION:
        raise ValueError(f"{name}: section too large")
    import zstandard

    try:
        out: bytes = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except zstandard.ZstdError as error:
        raise ValueError(f"{name}: {error}") from None
    if len(out) != size:
        raise ValueError(f"{name}: bad decompressed size")
    return out


class Stream:
    """A section's contents as the binary stream pyelftools reads (``read``, ``seek``,
    ``tell``, served by a ``BytesIO``). A zlib-compressed section is inflated only as far
    as it is read: the CU of an address near the start of a 6 MB ``.debug_info`` does not
    pay for the rest."""

    _CHUNK = 1 << 16

    def __init__(self, name: str, data: bytes, start: int | None = None,
                 size: int | None = None) -> None:
        self.name = name
        self._inflater: Any = None
        self._input = memoryview(b"")
        if start is None or size is None:
            self._io = io.BytesIO(data)
            self.size = self._available = len(data)
        else:
            if size > MAX_SECTION:
                raise ValueError(f"{name}: section too large")
            self._io = io.BytesIO()
            self.size = size
            self._available = 0
            self._input = memoryview(data)[start:]
            self._inflater = zlib.decompressobj()
        self.seek: Callable[..., int] = self._io.seek
        self.tell: Callable[[], int] = self._io.tell
        self.read: Callable[..., bytes] = (
            self._io.read if self._available == self.size else self._read)

    def _read(self, count: int | None = -1) -> bytes:
        """``read`` until the section is inflated (then BytesIO's own)."""
        position = self._io.tell()
        end = self.size if count is None or count < 0 else position + count
        if end > self._available:
            self._fill(end)
        return self._io.read(count)

    def _fill(self, end: int) -> None:
        end = min(end, self.size)
        position = self._io.tell()
        self._io.seek(self._available)
        try:
            while self._available < end and self._inflater is not None:
                inflater = self._inflater
                if inflater.unconsumed_tail:
                    chunk = inflater.unconsumed_tail
                elif self._input:
                    chunk, self._input = self._input[:self._CHUNK], self._input[self._CHUNK:]
                else:
                    break
                try:
                    out = inflater.decompress(chunk, max(end - self._available,
                                                         4 * self._CHUNK))
                except zlib.error as error:
                    raise ValueError(f"{self.name}: {error}") from None
                self._available += len(out)
                if self._available > self.size:
                    raise ValueError(f"{self.name}: bad decompressed size")
                self._io.write(out)
                if inflater.eof:
                    self._inflater = None
        finally:
            self._io.seek(position)
        if self._available < end:
            raise ValueError(f"{self.name}: truncated compressed section")
        if self._available == self.size:
            self.read = self._io.read

    def contents(self) -> bytes:
        self._fill(self.size)
        return self._io.getvalue()

    def piece(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (the stream position is kept)."""
        if start + length > self._available:
            self._fill(start + length)
        position = self._io.tell()
        self._io.seek(start)
        data = self._io.read(length)
        self._io.seek(position)
        if len(data) != length:
            raise ValueError(f"{self.name}: read past the end")
        return data
