"""Writing perf.data: a recording rewritten with new records, as perf lays the file out.

Used by ``sframe defer`` (a ``--call-graph dwarf`` recording turned into the one the
kernel's deferred unwinder would have produced) and by the tests that build recordings
of the deferred-callchain ABI. Written by hand from the layout
(``shared/spec/perf-and-ptrace.md`` §2): no library writes perf.data.

The header, the attribute section and the feature sections of the input are kept; the
data section is replaced, the feature table's absolute offsets moved to match, and the
attributes patched in place in both the attribute section and the EVENT_DESC feature
(perf reads the first, names events from the second).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

from ..errors import PysframeError
from ..sources.perf_records import (
    SAMPLE_ADDR,
    SAMPLE_BRANCH_STACK,
    SAMPLE_CALLCHAIN,
    SAMPLE_CPU,
    SAMPLE_ID,
    SAMPLE_IDENTIFIER,
    SAMPLE_IP,
    SAMPLE_PERIOD,
    SAMPLE_RAW,
    SAMPLE_READ,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_STREAM_ID,
    SAMPLE_TID,
    SAMPLE_TIME,
)

RECORD_CALLCHAIN_DEFERRED = 22
PERF_CONTEXT_USER_DEFERRED = (1 << 64) - 640
MISC_USER = 2
#: perf_event_attr flag bits: exclude_callchain_user, defer_callchain, defer_output.
FLAG_EXCLUDE_CALLCHAIN_USER = 1 << 22
FLAG_DEFER_CALLCHAIN = 1 << 38
FLAG_DEFER_OUTPUT = 1 << 39
FEATURE_EVENT_DESC = 12
#: Offsets in perf_event_attr.
ATTR_SAMPLE_TYPE, ATTR_FLAGS, ATTR_REGS_USER, ATTR_STACK_USER = 24, 40, 80, 88
_PREFIX = (SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID,
           SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD)
_TRAILER = (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER)


class WriteError(PysframeError):
    """A record or file this writer cannot rewrite (the message names what)."""


def sample_parts(record: bytes | memoryview, sample_type: int, register_count: int
                 ) -> tuple[int, int, int, int]:
    """Where a SAMPLE record's callchain and user copy lie: (callchain start, callchain
    end, user registers start, user stack end), offsets in the record (start == end:
    the field is absent)."""
    if sample_type & SAMPLE_READ:
        raise WriteError("samples with PERF_SAMPLE_READ are not rewritten")
    size = len(record)
    position = 8 + 8 * sum(1 for bit in _PREFIX if sample_type & bit)

    def word(at: int) -> int:
        if at + 8 > size:
            raise WriteError(f"sample field at byte {at} runs past its record of {size}")
        return int(struct.unpack_from("<Q", record, at)[0])

    chain_start = chain_end = position
    if sample_type & SAMPLE_CALLCHAIN:
        chain_end = position + 8 + 8 * word(position)
        position = chain_end
    if sample_type & SAMPLE_RAW:
        if position + 4 > size:
            raise WriteError("raw sample data runs past its record")
        position += 4 + int(struct.unpack_from("<I", record, position)[0])
    if sample_type & SAMPLE_BRANCH_STACK:
        raise WriteError("samples with a branch stack are not rewritten")
    user_start = position
    if sample_type & SAMPLE_REGS_USER:
        position += 8 + (8 * register_count if word(position) else 0)
    if sample_type & SAMPLE_STACK_USER:
        copied = word(position)
        position += 8 + (copied + 8 if copied else 0)
    if position > size:
        raise WriteError(f"sample fields end at byte {position}, past its record of {size}")
    return chain_start, chain_end, user_start, position


def record(kind: int, misc: int, body: bytes) -> bytes:
    """A record: its header, then ``body`` (padded to 8 bytes)."""
    body += bytes(-len(body) % 8)
    if 8 + len(body) > 0xFFFF:
        raise WriteError(f"a record of {8 + len(body)} bytes does not fit a perf record")
    return struct.pack("<IHH", kind, misc, 8 + len(body)) + body


def sample_id_trailer(sample_type: int, pid: int, tid: int, time: int, cpu: int,
                      sample_id: int = 0) -> bytes:
    """The sample_id_all trailer of a non-sample record, for ``sample_type``."""
    values = {SAMPLE_TID: struct.pack("<ii", pid, tid), SAMPLE_TIME: struct.pack("<Q", time),
              SAMPLE_ID: struct.pack("<Q", sample_id), SAMPLE_STREAM_ID: struct.pack("<Q", 0),
              SAMPLE_CPU: struct.pack("<II", cpu, 0),
              SAMPLE_IDENTIFIER: struct.pack("<Q", sample_id)}
    return b"".join(values[bit] for bit in _TRAILER if sample_type & bit)


def callchain_deferred(cookie: int, ips: Iterable[int], trailer: bytes) -> bytes:
    """A PERF_RECORD_CALLCHAIN_DEFERRED record (type 22): cookie, the user ips, trailer."""
    addresses = list(ips)
    return record(RECORD_CALLCHAIN_DEFERRED, MISC_USER,
                  struct.pack(f"<QQ{len(addresses)}Q", cookie, len(addresses), *addresses)
                  + trailer)


#: Changes a perf_event_attr's bytes in place; given the event's index.
AttrPatch = Callable[[bytearray, int], None]


def rewritten(raw: bytes | memoryview, data: bytes, patch_attr: AttrPatch) -> bytes:
    """The file ``raw`` with ``data`` as its data section and every attribute passed
    through ``patch_attr`` (with the event's index). ``raw`` may be
    the mapped input: only its header, attributes and features are copied."""
    if len(raw) < 104 or bytes(raw[:8]) != b"PERFILE2":
        raise WriteError("not a perf.data file (no PERFILE2 header)")
    attr_size, attrs_offset, attrs_size, start, size = struct.unpack_from("<QQQQQ", raw, 16)
    if attrs_offset + attrs_size > len(raw) or attr_size < 16 or start > len(raw):
        raise WriteError("the file's attribute or data section lies past its end")
    features = int.from_bytes(bytes(raw[72:104]), "little")
    table = start + size
    if table + 16 * features.bit_count() > len(raw):
        features, size = 0, len(raw) - start  # a truncated file: its features are gone
    out = bytearray(raw[:start]) + data + raw[table:] if features else (
        bytearray(raw[:start]) + data)
    struct.pack_into("<Q", out, 48, len(data))
    out[72:104] = features.to_bytes(32, "little")
    for index, at in enumerate(range(attrs_offset, attrs_offset + attrs_size - attr_size + 1,
                                     attr_size)):
        _patch(out, at, attr_size - 16, patch_attr, index)
    delta, table = len(data) - size, start + len(data)
    for index in range(features.bit_count()):
        offset, length = struct.unpack_from("<QQ", out, table + 16 * index)
        if offset >= start + size:
            offset += delta
            struct.pack_into("<Q", out, table + 16 * index, offset)
        if _feature_bit(features, index) == FEATURE_EVENT_DESC:
            _patch_event_desc(out, offset, length, patch_attr)
    return bytes(out)


def _patch(out: bytearray, at: int, size: int, patch_attr: AttrPatch, index: int) -> None:
    attr = bytearray(out[at:at + size])
    patch_attr(attr, index)
    out[at:at + size] = attr


def _feature_bit(features: int, index: int) -> int:
    """The feature number of the ``index``-th set bit."""
    bits = [bit for bit in range(256) if features >> bit & 1]
    return bits[index]


def _patch_event_desc(out: bytearray, offset: int, length: int, patch_attr: AttrPatch
                      ) -> None:
    """EVENT_DESC: u32 count, u32 attr size, then per event: attr, u32 id count, a string
    (u32 length + bytes), the ids."""
    end = offset + length
    if offset + 8 > end or end > len(out):
        return
    count, attr_size = struct.unpack_from("<II", out, offset)
    position = offset + 8
    for index in range(count):
        if position + attr_size + 8 > end:
            return
        _patch(out, position, attr_size, patch_attr, index)
        position += attr_size
        ids = struct.unpack_from("<I", out, position)[0]
        name_length = struct.unpack_from("<I", out, position + 4)[0]
        position += 8 + name_length + 8 * ids


def defer_attr(attr: bytearray, index: int) -> None:
    """An attribute as ``--call-graph fp,defer`` sets it: no user registers or stack copy,
    user callchains deferred; the deferred records output by the first event only (more
    would duplicate them)."""
    sample_type, = struct.unpack_from("<Q", attr, ATTR_SAMPLE_TYPE)
    flags, = struct.unpack_from("<Q", attr, ATTR_FLAGS)
    struct.pack_into("<Q", attr, ATTR_SAMPLE_TYPE,
                     sample_type & ~(SAMPLE_REGS_USER | SAMPLE_STACK_USER))
    flags = (flags & ~(FLAG_EXCLUDE_CALLCHAIN_USER | FLAG_DEFER_OUTPUT)) | FLAG_DEFER_CALLCHAIN
    if index == 0:
        flags |= FLAG_DEFER_OUTPUT
    struct.pack_into("<Q", attr, ATTR_FLAGS, flags)
    struct.pack_into("<Q", attr, ATTR_REGS_USER, 0)
    struct.pack_into("<I", attr, ATTR_STACK_USER, 0)


RECORD_SAMPLE = 9
#: PERF_RECORD_COMPRESSED and COMPRESSED2: their records are not rewritten.
_COMPRESSED = (81, 83)
_MARKER_MIN = (1 << 64) - 4095


def deferred_data(raw: bytes | memoryview, sample_type: int, register_count: int,
                  cookie_of: Callable[[int], int | None], after: dict[int, bytes]
                  ) -> tuple[bytes, int, int]:
    """The data section of ``raw`` with every sample's user copy dropped and its user part
    deferred: ``cookie_of(file offset)`` gives its cookie (None: a sample with no user
    context, kept with its kernel part), ``after[file offset]`` the records written after
    it. Returns (data, bytes of the samples before, bytes of samples and deferred records
    after)."""
    start, size = struct.unpack_from("<QQ", raw, 40)
    offset, end = start, min(start + size, len(raw))
    out: list[bytes] = []
    before = written = 0
    while offset + 8 <= end:
        kind, misc, length = struct.unpack_from("<IHH", raw, offset)
        if length < 8:
            raise WriteError(f"record of {length} bytes at offset {offset:#x}")
        if offset + length > end:
            break  # a truncated file: the reader reported what it skipped
        if kind in _COMPRESSED:
            raise WriteError("compressed records (perf record -z) are not rewritten: "
                             "decompress with `perf inject -i IN -o OUT` first")
        chunk = bytes(raw[offset:offset + length])
        if kind != RECORD_SAMPLE:
            out.append(chunk)
        else:
            new = _deferred_sample(chunk, misc, sample_type, register_count, cookie_of(offset))
            extra = after.get(offset, b"")
            out += [new, extra]
            before += length
            written += len(new) + len(extra)
        offset += length
    return b"".join(out), before, written


def _deferred_sample(chunk: bytes, misc: int, sample_type: int, register_count: int,
                     cookie: int | None) -> bytes:
    chain_start, chain_end, user_start, user_end = sample_parts(chunk, sample_type,
                                                                register_count)
    chain: list[int] = []
    if chain_end > chain_start:
        count = struct.unpack_from("<Q", chunk, chain_start)[0]
        recorded = struct.unpack_from(f"<{count}Q", chunk, chain_start + 8)
        # The kernel part: up to a user context (dwarf mode records none; fp mode does).
        for address in recorded:
            if address >= _MARKER_MIN and address != (1 << 64) - 128:
                break
            chain.append(address)
    if cookie is not None:
        chain += [PERF_CONTEXT_USER_DEFERRED, cookie]
    return record(RECORD_SAMPLE, misc,
                  chunk[8:chain_start] + struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
                  + chunk[chain_end:user_start] + chunk[user_end:])
