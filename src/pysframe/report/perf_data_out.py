"""The one perf.data writer: the file (header, attribute section, data section, feature
sections), the attributes, and the records, as perf lays them out.

Written by hand from the layout (``shared/spec/perf-and-ptrace.md`` §2): no library writes
perf.data. Two commands write through it:

- ``sframe record`` (:mod:`pysframe.record.perf_file` turns the walker's records into
  perf records with the encoders here) builds a file from nothing with :func:`perf_data`:
  a 104-byte header, one attribute, the data section, and the BUILD_ID feature.
- ``sframe defer`` (and the tests that build recordings of the deferred-callchain ABI)
  rewrites a recording with :func:`rewritten`: the header, the attribute section and the
  feature sections of the input are kept; the data section is replaced, the feature
  table's absolute offsets moved to match, and the attributes patched in place in both
  the attribute section and the EVENT_DESC feature (perf reads the first, names events
  from the second).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping

from ..errors import PysframeError
from ..sources.perf_records import (
    COMPRESSED_KINDS,
    RECORD_CALLCHAIN_DEFERRED,
    RECORD_COMM,
    RECORD_HEADER,
    RECORD_MMAP,
    RECORD_MMAP2,
    RECORD_SAMPLE,
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

PERF_CONTEXT_USER_DEFERRED = (1 << 64) - 640
PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER = (1 << 64) - 128, (1 << 64) - 512
MISC_KERNEL, MISC_USER = 1, 2
#: perf_event_attr flag bits: exclude_callchain_user, defer_callchain, defer_output.
FLAG_EXCLUDE_CALLCHAIN_USER = 1 << 22
FLAG_DEFER_CALLCHAIN = 1 << 38
FLAG_DEFER_OUTPUT = 1 << 39
FEATURE_BUILD_ID = 2
FEATURE_EVENT_DESC = 12
#: Offsets in perf_event_attr.
ATTR_SAMPLE_TYPE, ATTR_FLAGS, ATTR_REGS_USER, ATTR_STACK_USER = 24, 40, 80, 88
#: The file header: magic, header size, attr entry size, attrs (offset, size), data
#: (offset, size), event types (offset, size), the feature bitmap.
HEADER = struct.Struct("<8sQQQQQQQQ32s")
MAGIC = b"PERFILE2"
_PREFIX = (SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID,
           SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD)
_TRAILER = (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER)
#: The sample fields :func:`sample` writes.
_SAMPLE_WRITTEN = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD | \
    SAMPLE_CALLCHAIN | SAMPLE_RAW


class WriteError(PysframeError):
    """A record or file this writer cannot rewrite (the message names what)."""


# --- records ------------------------------------------------------------------------------

def record(kind: int, misc: int, body: bytes) -> bytes:
    """A record: its header, then ``body`` (padded to 8 bytes)."""
    body += bytes(-len(body) % 8)
    if 8 + len(body) > 0xFFFF:
        raise WriteError(f"a record of {8 + len(body)} bytes does not fit a perf record")
    return RECORD_HEADER.pack(kind, misc, 8 + len(body)) + body


def sample_id_trailer(sample_type: int, pid: int, tid: int, time: int, cpu: int,
                      sample_id: int = 0) -> bytes:
    """The sample_id_all trailer of a non-sample record, for ``sample_type``."""
    values = {SAMPLE_TID: struct.pack("<ii", pid, tid), SAMPLE_TIME: struct.pack("<Q", time),
              SAMPLE_ID: struct.pack("<Q", sample_id), SAMPLE_STREAM_ID: struct.pack("<Q", 0),
              SAMPLE_CPU: struct.pack("<II", cpu, 0),
              SAMPLE_IDENTIFIER: struct.pack("<Q", sample_id)}
    return b"".join(values[bit] for bit in _TRAILER if sample_type & bit)


def sample(sample_type: int, misc: int, *, ip: int, pid: int, tid: int, time: int, cpu: int,
           period: int, chain: Iterable[int], raw: bytes = b"") -> bytes:
    """A PERF_RECORD_SAMPLE of ``sample_type`` (any of IP, TID, TIME, CPU, PERIOD,
    CALLCHAIN and RAW), its fields in perf's order; ``raw``: the RAW field whole (its u32
    size, then the data; 8-byte aligned)."""
    if sample_type & ~_SAMPLE_WRITTEN:
        raise WriteError(f"sample type {sample_type:#x}: only IP, TID, TIME, CPU, PERIOD, "
                         "CALLCHAIN and RAW samples are written")
    if bool(sample_type & SAMPLE_RAW) != bool(raw) or len(raw) % 8:
        raise WriteError("a RAW field of a multiple of 8 bytes is written where the sample "
                         "type has RAW, and only there")
    if sample_type == _SAMPLE_WRITTEN:  # every field: the recorder's layout, one writer
        addresses = list(chain)
        return full_sample(misc, ip=ip, pid=pid, tid=tid, time=time, cpu=cpu, period=period,
                           length=len(addresses),
                           chain=struct.pack(f"<{len(addresses)}Q", *addresses), raw=raw)
    fields = []
    if sample_type & SAMPLE_IP:
        fields.append(struct.pack("<Q", ip))
    if sample_type & SAMPLE_TID:
        fields.append(struct.pack("<II", pid, tid))
    if sample_type & SAMPLE_TIME:
        fields.append(struct.pack("<Q", time))
    if sample_type & SAMPLE_CPU:
        fields.append(struct.pack("<II", cpu, 0))
    if sample_type & SAMPLE_PERIOD:
        fields.append(struct.pack("<Q", period))
    if sample_type & SAMPLE_CALLCHAIN:
        addresses = list(chain)
        fields.append(struct.pack(f"<Q{len(addresses)}Q", len(addresses), *addresses))
    fields.append(raw)
    return record(RECORD_SAMPLE, misc, b"".join(fields))


#: The head of a sample of every field :func:`sample` writes: record header, ip, pid and
#: tid, time, cpu and its padding, period, the callchain's length.
_FULL_SAMPLE_HEAD = struct.Struct("<IHHQIIQIIQQ")


def full_sample(misc: int, *, ip: int, pid: int, tid: int, time: int, cpu: int, period: int,
                length: int, chain: bytes, raw: bytes) -> bytes:
    """:func:`sample` of every field it writes (IP, TID, TIME, CPU, PERIOD, CALLCHAIN and
    RAW), its callchain of ``length`` addresses given as their little-endian u64 bytes
    (``chain``): ``sframe record`` copies the walker's frames without unpacking them."""
    if not raw or len(raw) % 8 or len(chain) != 8 * length:
        raise WriteError("a callchain of whole addresses and a RAW field of a multiple of "
                         "8 bytes are written")
    size = _FULL_SAMPLE_HEAD.size + len(chain) + len(raw)
    if size > 0xFFFF:
        raise WriteError(f"a record of {size} bytes does not fit a perf record")
    return _FULL_SAMPLE_HEAD.pack(RECORD_SAMPLE, misc, size, ip, pid, tid, time, cpu, 0,
                                  period, length) + chain + raw


def _name(text: str) -> bytes:
    """A file or command name as records carry it: NUL-terminated, padded to 8 bytes."""
    raw = text.encode("utf-8", "surrogateescape") + b"\0"
    return raw + bytes(-len(raw) % 8)


def comm(pid: int, tid: int, name: str, trailer: bytes) -> bytes:
    """A PERF_RECORD_COMM (as perf synthesizes one for a thread that was already running)."""
    return record(RECORD_COMM, 0, struct.pack("<ii", pid, tid) + _name(name) + trailer)


def mmap(misc: int, pid: int, tid: int, start: int, length: int, pgoff: int, filename: str,
         trailer: bytes) -> bytes:
    """A PERF_RECORD_MMAP."""
    return record(RECORD_MMAP, misc, struct.pack("<iiQQQ", pid, tid, start, length, pgoff)
                  + _name(filename) + trailer)


def mmap2(misc: int, pid: int, tid: int, start: int, length: int, pgoff: int, *,
          major: int, minor: int, inode: int, prot: int, flags: int, filename: str,
          trailer: bytes) -> bytes:
    """A PERF_RECORD_MMAP2 naming its file by device and inode (no generation)."""
    return record(RECORD_MMAP2, misc,
                  struct.pack("<iiQQQIIQQII", pid, tid, start, length, pgoff, major, minor,
                              inode, 0, prot, flags) + _name(filename) + trailer)


def callchain_deferred(cookie: int, ips: Iterable[int], trailer: bytes) -> bytes:
    """A PERF_RECORD_CALLCHAIN_DEFERRED record (type 22): cookie, the user ips, trailer."""
    addresses = list(ips)
    return record(RECORD_CALLCHAIN_DEFERRED, MISC_USER,
                  struct.pack(f"<QQ{len(addresses)}Q", cookie, len(addresses), *addresses)
                  + trailer)


# --- attributes -----------------------------------------------------------------------------

def event_attr(event_type: int, config: int, frequency: int, sample_type: int,
               flags: int) -> bytes:
    """A 128-byte perf_event_attr: event (``event_type``, ``config``) sampled at
    ``frequency`` Hz (``freq`` in ``flags``), its samples of ``sample_type``."""
    attr = bytearray(128)
    struct.pack_into("<IIQQQQQ", attr, 0, event_type, 128, config, frequency, sample_type, 0,
                     flags)
    return bytes(attr)


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


def event_desc(events: Iterable[tuple[bytes, str]]) -> bytes:
    """The EVENT_DESC feature naming each attribute (perf pairs them by position): u32
    count, u32 attr size, then per event the attr, u32 id count (0 here), the name (u32
    length, then the bytes with a NUL, padded to 64 as perf pads them)."""
    listed = list(events)
    size = len(listed[0][0]) if listed else 0
    out = [struct.pack("<II", len(listed), size)]
    for attr, name in listed:
        raw = name.encode() + b"\0"
        raw += bytes(-len(raw) % 64)
        out.append(attr + struct.pack("<II", 0, len(raw)) + raw)
    return b"".join(out)


# --- the file -------------------------------------------------------------------------------

def perf_data(attrs: Iterable[bytes], data: bytes, features: Mapping[int, bytes]) -> bytes:
    """A whole file: the header, the attribute section (each attribute with an empty id
    array), the data section, then the feature table and the sections of ``features``
    (feature number -> its bytes; empty ones left out), in feature order."""
    return b"".join(perf_data_chunks(attrs, len(data), [data], features))


def perf_data_chunks(attrs: Iterable[bytes], data_size: int, data: Iterable[bytes],
                     features: Mapping[int, bytes]) -> Iterator[bytes]:
    """:func:`perf_data` in pieces, the data section given as chunks of ``data_size``
    bytes in all (a recording's records are never whole in memory)."""
    entries = [attr + struct.pack("<QQ", 0, 0) for attr in attrs]
    entry_size = len(entries[0]) if entries else 0
    attrs_at = HEADER.size
    data_at = attrs_at + sum(len(entry) for entry in entries)
    present = sorted(number for number, body in features.items() if body)
    table: list[bytes] = []
    body_at = data_at + data_size + 16 * len(present)
    for number in present:
        table.append(struct.pack("<QQ", body_at, len(features[number])))
        body_at += len(features[number])
    bitmap = sum(1 << number for number in present)
    yield HEADER.pack(MAGIC, HEADER.size, entry_size, attrs_at, data_at - attrs_at, data_at,
                      data_size, 0, 0, bitmap.to_bytes(32, "little"))
    yield b"".join(entries)
    written = 0
    for chunk in data:
        written += len(chunk)
        yield chunk
    if written != data_size:
        raise WriteError(f"the data section is {written} bytes, not the {data_size} announced")
    yield b"".join([*table, *(features[n] for n in present)])


def build_id_entry(build_id: bytes, filename: str, kernel: bool) -> bytes:
    """One record of the BUILD_ID feature: perf's ``build_id_event`` (pid -1: the host)."""
    name = filename.encode("utf-8", "surrogateescape") + b"\0"
    name += bytes(-len(name) % 64)  # perf pads names to 64 bytes
    body = struct.pack("<i", -1) + build_id[:20].ljust(20, b"\0") + bytes(
        [min(len(build_id), 20)]) + bytes(3) + name
    misc = (MISC_KERNEL if kernel else MISC_USER) | 0x8000  # the size byte is valid
    return RECORD_HEADER.pack(0, misc, 8 + len(body)) + body


#: Changes a perf_event_attr's bytes in place; given the event's index.
AttrPatch = Callable[[bytearray, int], None]


def rewritten(raw: bytes | memoryview, data: bytes, patch_attr: AttrPatch) -> bytes:
    """The file ``raw`` with ``data`` as its data section and every attribute passed
    through ``patch_attr`` (with the event's index). ``raw`` may be
    the mapped input: only its header, attributes and features are copied."""
    if len(raw) < HEADER.size or bytes(raw[:len(MAGIC)]) != MAGIC:
        raise WriteError("not a perf.data file (no PERFILE2 header)")
    (_, header_size, attr_size, attrs_offset, attrs_size, start, size, types_offset,
     types_size, bitmap) = HEADER.unpack_from(raw)
    if attrs_offset + attrs_size > len(raw) or attr_size < 16 or start > len(raw):
        raise WriteError("the file's attribute or data section lies past its end")
    features = int.from_bytes(bitmap, "little")
    table = start + size
    if table + 16 * features.bit_count() > len(raw):
        features, size = 0, len(raw) - start  # a truncated file: its features are gone
    out = bytearray(raw[:start]) + data + raw[table:] if features else (
        bytearray(raw[:start]) + data)
    HEADER.pack_into(out, 0, MAGIC, header_size, attr_size, attrs_offset, attrs_size, start,
                     len(data), types_offset, types_size, features.to_bytes(32, "little"))
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


# --- rewriting a recording's data section ---------------------------------------------------

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


_MARKER_MIN = (1 << 64) - 4095


def deferred_data(raw: bytes | memoryview, sample_type: int, register_count: int,
                  cookie_of: Callable[[int], int | None], after: dict[int, bytes]
                  ) -> tuple[bytes, int, int]:
    """The data section of ``raw`` with every sample's user copy dropped and its user part
    deferred: ``cookie_of(file offset)`` gives its cookie (None: a sample with no user
    context, kept with its kernel part), ``after[file offset]`` the records written after
    it. Returns (data, bytes of the samples before, bytes of samples and deferred records
    after)."""
    start, size = HEADER.unpack_from(raw)[5:7]
    offset, end = start, min(start + size, len(raw))
    out: list[bytes] = []
    before = written = 0
    while offset + 8 <= end:
        kind, misc, length = RECORD_HEADER.unpack_from(raw, offset)
        if length < 8:
            raise WriteError(f"record of {length} bytes at offset {offset:#x}")
        if offset + length > end:
            break  # a truncated file: the reader reported what it skipped
        if kind in COMPRESSED_KINDS:  # (their records are not rewritten)
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
            if address >= _MARKER_MIN and address != PERF_CONTEXT_KERNEL:
                break
            chain.append(address)
    if cookie is not None:
        chain += [PERF_CONTEXT_USER_DEFERRED, cookie]
    return record(RECORD_SAMPLE, misc,
                  chunk[8:chain_start] + struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
                  + chunk[chain_end:user_start] + chunk[user_end:])
