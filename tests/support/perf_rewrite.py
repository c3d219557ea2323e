"""Hostile variants of a real perf.data recording, for the tests and ``bench/script_memory.py``.

Written from the layout (``shared/spec/perf-and-ptrace.md`` §2): a 104-byte header whose
data section ``(offset, size)`` sits at byte 40, records ``{u32 type, u16 misc, u16 size}``,
and the feature table of ``(u64 offset, u64 size)`` pairs right after the data section,
pointing at feature bodies further on (their offsets are absolute, so they move when the
data section changes size).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator

FINISHED_ROUND = 68
FINISHED_INIT = 82  # header-only, ignored by readers: a harmless stand-in of the same size
COMPRESSED = 81
FEATURE_COMPRESSED = 27


def data_extent(raw: bytes) -> tuple[int, int]:
    """(offset, size) of the data section."""
    offset, size = struct.unpack_from("<QQ", raw, 40)
    return offset, size


def records(raw: bytes) -> Iterator[tuple[int, int, int]]:
    """(offset, type, size) of each top-level record of the data section."""
    start, size = data_extent(raw)
    offset, end = start, start + size
    while offset + 8 <= end:
        kind, _, length = struct.unpack_from("<IHH", raw, offset)
        if length < 8:
            return
        yield offset, kind, length
        offset += length


def feature_count(raw: bytes) -> int:
    return int.from_bytes(raw[72:104], "little").bit_count()


def feature_table(raw: bytes) -> int:
    """Offset of the feature table."""
    start, size = data_extent(raw)
    return start + size


def with_data(raw: bytes, data: bytes) -> bytes:
    """``raw`` with its data section replaced by ``data`` (header size and feature offsets
    moved to match)."""
    start, size = data_extent(raw)
    delta = len(data) - size
    out = bytearray(raw[:start]) + data + raw[start + size:]
    struct.pack_into("<Q", out, 48, len(data))
    table = start + len(data)
    for index in range(feature_count(raw)):
        offset = struct.unpack_from("<Q", out, table + 16 * index)[0]
        if offset >= start + size:
            struct.pack_into("<Q", out, table + 16 * index, offset + delta)
    return bytes(out)


def without_rounds(raw: bytes) -> bytes:
    """Every FINISHED_ROUND record turned into a FINISHED_INIT (same size, no meaning)."""
    out = bytearray(raw)
    for offset, kind, _ in records(raw):
        if kind == FINISHED_ROUND:
            struct.pack_into("<I", out, offset, FINISHED_INIT)
    return bytes(out)


def repeated(raw: bytes, copies: int) -> bytes:
    """The data section ``copies`` times over (a recording ``copies`` times as large)."""
    start, size = data_extent(raw)
    return with_data(raw, raw[start:start + size] * copies)


def compressed_records(payloads: Iterable[bytes]) -> bytes:
    """PERF_RECORD_COMPRESSED records carrying ``payloads`` (each < 64 KiB - 8)."""
    out = bytearray()
    for payload in payloads:
        size = 8 + len(payload)
        assert size < 1 << 16, size
        out += struct.pack("<IHH", COMPRESSED, 0, size) + payload
    return bytes(out)


def inflated(raw: bytes, decompress: Callable[[bytes], bytes]) -> bytes:
    """The records of a ``perf record -z`` data section, uncompressed (one stream)."""
    stream = b"".join(raw[offset + 8:offset + size] for offset, kind, size in records(raw)
                      if kind == COMPRESSED)
    return decompress(stream)


def comp_mmap_len(raw: bytes) -> int:
    """The ``mmap_len`` of the COMPRESSED feature (the recording's ring-buffer size)."""
    bits = int.from_bytes(raw[72:104], "little")
    index = (bits & ((1 << FEATURE_COMPRESSED) - 1)).bit_count()
    offset, _ = struct.unpack_from("<QQ", raw, feature_table(raw) + 16 * index)
    return int(struct.unpack_from("<I", raw, offset + 16)[0])


def strip_rounds_in_place(path: str) -> int:
    """:func:`without_rounds` on a file, record by record (for recordings too large to hold
    in memory); the number of records changed."""
    fd = os.open(path, os.O_RDWR)
    try:
        start, size = struct.unpack("<QQ", os.pread(fd, 16, 40))
        offset, end, changed = start, start + size, 0
        while offset + 8 <= end:
            kind, _, length = struct.unpack("<IHH", os.pread(fd, 8, offset))
            if length < 8:
                break
            if kind == FINISHED_ROUND:
                os.pwrite(fd, struct.pack("<I", FINISHED_INIT), offset)
                changed += 1
            offset += length
    finally:
        os.close(fd)
    return changed


def inflate(stream: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(stream))


def leading_records(raw: bytes) -> bytes:
    """The uncompressed records before the first compressed one (header records, COMM)."""
    start, _ = data_extent(raw)
    first = next(offset for offset, kind, _ in records(raw) if kind == COMPRESSED)
    return raw[start:first]


def pieces(data: bytes, size: int = 60_000) -> list[bytes]:
    """``data`` cut into payloads that fit in records."""
    return [data[at:at + size] for at in range(0, len(data), size)]


def zstd_bomb(raw: bytes, inflates_to: int, count: int = 2,
              frames: bool = False) -> tuple[bytes, list[int]]:
    """A ``perf record -z`` recording rewritten into: its records (compressed again), a
    FINISHED_ROUND, ``count`` compressed records of a few KB that inflate to
    ``inflates_to`` bytes each of header-only records, then its records again in a new
    zstd frame. The bomb records continue the stream of the records before them, or with
    ``frames`` each starts a frame of its own (so that each could be decoded alone).
    Returns the file and the offsets of the bomb records."""
    import zstandard

    stream = inflated(raw, inflate)
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    good = compressor.compress(stream) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    tiny = struct.pack("<IHH", FINISHED_INIT, 0, 8) * 8192  # 64 KiB of header-only records
    bomb = []
    for _ in range(count):
        if frames:
            compressor = zstandard.ZstdCompressor(level=3).compressobj()
        bomb.append(b"".join(compressor.compress(tiny) for _ in range(inflates_to // len(tiny)))
                    + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    fresh = zstandard.ZstdCompressor(level=3).compress(stream)
    start, _ = data_extent(raw)
    data = bytearray(leading_records(raw) + compressed_records(pieces(good))
                     + struct.pack("<IHH", FINISHED_ROUND, 0, 8))
    offsets = []
    for payload in bomb:
        offsets.append(start + len(data))
        data += compressed_records([payload])
    data += compressed_records(pieces(fresh))
    return with_data(raw, bytes(data)), offsets
