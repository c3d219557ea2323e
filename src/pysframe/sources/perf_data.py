"""Reading perf.data files written by ``perf record`` (``--call-graph dwarf`` in particular).

Hand-written: no maintained Python package reads perf.data. The file is
mapped (``mmap``) and read through a ``memoryview``; a sample's copied user
stack is a view into the mapping, never copied. Records are yielded one at a
time, so memory does not grow with the number of samples; :func:`in_time_order`
reorders them the way ``perf script`` does (flushing at FINISHED_ROUND).
Truncated or corrupt files: everything readable is yielded and what had to be
skipped is counted in :attr:`PerfData.skipped` (offset and reason).
See ``shared/spec/perf-and-ptrace.md`` §2 for the layout.
"""

from __future__ import annotations

import heapq
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import PysframeError

MAGIC = b"PERFILE2"

# Record types.
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_FORK = 7
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
RECORD_LOST_SAMPLES = 13
RECORD_FINISHED_ROUND = 68
RECORD_COMPRESSED = 81

# sample_type bits.
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_WEIGHT = 1 << 14
SAMPLE_DATA_SRC = 1 << 15
SAMPLE_IDENTIFIER = 1 << 16

FEATURE_BUILD_ID = 2
FEATURE_HOSTNAME = 3
FEATURE_OSRELEASE = 4
FEATURE_VERSION = 5
FEATURE_ARCH = 6
FEATURE_NRCPUS = 7
FEATURE_CMDLINE = 11

#: Mapped pages further than this behind the reader are dropped (see _release_behind).
RELEASE_MARGIN = 32 * 2**20
RELEASE_STEP = 16 * 2**20

_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<8sQQQQQQQQ32s")
_RECORD = struct.Struct("<IHH")


class PerfDataError(PysframeError, ValueError):
    """The file is not a perf.data file we can read (with the byte offset)."""


@dataclass(slots=True)
class EventAttr:
    type: int
    config: int
    sample_type: int
    read_format: int
    flags: int
    sample_regs_user: int
    sample_stack_user: int
    ids: tuple[int, ...] = ()

    @property
    def sample_id_all(self) -> bool:
        return bool(self.flags & (1 << 18))


@dataclass(slots=True)
class Sample:
    """One PERF_RECORD_SAMPLE; ``stack`` is a view into the mapped file."""

    offset: int
    misc: int
    ip: int = 0
    pid: int = 0
    tid: int = 0
    time: int = 0
    addr: int = 0
    id: int = 0
    cpu: int = 0
    period: int = 0
    callchain: tuple[int, ...] = ()
    regs_abi: int = 0
    regs: tuple[int, ...] = ()
    stack: memoryview | None = None
    stack_dyn_size: int = 0
    attr: EventAttr | None = None

    @property
    def cpumode(self) -> int:
        return self.misc & 7


@dataclass(slots=True)
class Mmap:
    offset: int
    pid: int
    tid: int
    start: int
    length: int
    pgoff: int
    filename: str
    prot: int = 0
    flags: int = 0
    build_id: bytes | None = None
    time: int = 0
    executable: bool = True


@dataclass(slots=True)
class Comm:
    offset: int
    pid: int
    tid: int
    comm: str
    exec: bool
    time: int = 0


@dataclass(slots=True)
class Task:
    """FORK (``exit`` False) or EXIT (``exit`` True)."""

    offset: int
    pid: int
    ppid: int
    tid: int
    ptid: int
    time: int
    exit: bool


@dataclass(slots=True)
class Lost:
    offset: int
    lost: int
    time: int = 0


@dataclass(slots=True)
class FinishedRound:
    offset: int


Record = Sample | Mmap | Comm | Task | Lost | FinishedRound


@dataclass(slots=True)
class BuildIdEntry:
    pid: int
    build_id: bytes
    filename: str
    kernel: bool


@dataclass(slots=True)
class PerfData:
    """An open perf.data file (use as a context manager, or call :meth:`close`)."""

    path: str
    buffer: memoryview
    attrs: list[EventAttr]
    data_offset: int
    data_size: int
    features: dict[int, tuple[int, int]]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    _map: mmap.mmap | None = None
    _by_id: dict[int, EventAttr] = field(default_factory=dict)
    _released: int = 0
    _zstd: Any = None

    def __enter__(self) -> PerfData:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap the file; while views from samples are still alive the map stays until
        they are gone (the garbage collector closes it then)."""
        try:
            self.buffer.release()
            if self._map is not None:
                self._map.close()
        except BufferError:
            pass
        self._map = None

    # --- feature sections ------------------------------------------------------------

    def _feature(self, bit: int) -> memoryview | None:
        extent = self.features.get(bit)
        if extent is None:
            return None
        offset, size = extent
        if offset + size > len(self.buffer):
            self.skipped.append((offset, f"feature {bit} runs past the end of the file"))
            return None
        return self.buffer[offset:offset + size]

    def _string(self, bit: int) -> str | None:
        data = self._feature(bit)
        if data is None or len(data) < 4:
            return None
        length = struct.unpack_from("<I", data, 0)[0]
        return bytes(data[4:4 + length]).split(b"\0", 1)[0].decode("utf-8", "replace")

    @property
    def hostname(self) -> str | None:
        return self._string(FEATURE_HOSTNAME)

    @property
    def os_release(self) -> str | None:
        return self._string(FEATURE_OSRELEASE)

    @property
    def arch(self) -> str | None:
        return self._string(FEATURE_ARCH)

    @property
    def perf_version(self) -> str | None:
        return self._string(FEATURE_VERSION)

    @property
    def cmdline(self) -> list[str]:
        data = self._feature(FEATURE_CMDLINE)
        if data is None or len(data) < 4:
            return []
        count = struct.unpack_from("<I", data, 0)[0]
        out, offset = [], 4
        for _ in range(min(count, len(data) // 4)):
            if offset + 4 > len(data):
                break
            length = struct.unpack_from("<I", data, offset)[0]
            out.append(bytes(data[offset + 4:offset + 4 + length]).split(b"\0", 1)[0].decode(
                "utf-8", "replace"))
            offset += 4 + length
        return out

    def build_ids(self) -> list[BuildIdEntry]:
        data = self._feature(FEATURE_BUILD_ID)
        out: list[BuildIdEntry] = []
        if data is None:
            return out
        offset = 0
        while offset + 8 <= len(data):
            _, misc, size = _RECORD.unpack_from(data, offset)
            if size < 36 or offset + size > len(data):
                self.skipped.append((self.features[FEATURE_BUILD_ID][0] + offset,
                                     "malformed build-id record"))
                break
            pid = struct.unpack_from("<i", data, offset + 8)[0]
            raw_id = bytes(data[offset + 12:offset + 32])
            id_size = data[offset + 32] if misc & 0x8000 else 20
            name = bytes(data[offset + 36:offset + size]).split(b"\0", 1)[0].decode(
                "utf-8", "replace")
            out.append(BuildIdEntry(pid, raw_id[:id_size] if id_size <= 20 else raw_id, name,
                                    misc & 7 == 1))
            offset += size
        return out

    # --- records ----------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Records in file order (compressed records are expanded)."""
        self._zstd = None  # a new pass decodes the compressed stream from its start
        yield from self._records(self.buffer, self.data_offset, self.data_offset + self.data_size,
                                 0)

    def _release_behind(self, offset: int) -> None:
        """Drop the mapped pages well behind the read position from our resident set.

        The file is mapped, so every page read stays resident and the peak RSS would
        grow with the file; records more than ``RELEASE_MARGIN`` behind are done with
        (time ordering holds two rounds, far less). Touching such a page again is still
        correct: it is read back from the file.
        """
        mapped = self._map
        if mapped is None or not hasattr(mapped, "madvise"):
            return
        end = (offset - RELEASE_MARGIN) & ~(mmap.PAGESIZE - 1)
        if end > self._released:
            try:
                mapped.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            except (OSError, ValueError):
                return
            self._released = end

    def _records(self, buffer: memoryview, start: int, end: int, base: int) -> Iterator[Record]:
        offset = start
        size_limit = min(end, len(buffer))
        top_level = buffer is self.buffer
        next_release = offset + RELEASE_STEP
        while offset + 8 <= size_limit:
            if top_level and offset >= next_release:
                self._release_behind(offset)
                next_release = offset + RELEASE_STEP
            kind, misc, size = _RECORD.unpack_from(buffer, offset)
            if size < 8 or offset + size > size_limit:
                self.skipped.append((base + offset, f"record of type {kind} with size {size} "
                                     "runs past the data section; rest of the data skipped"))
                return
            try:
                record = self._record(buffer, kind, misc, offset, size, base)
            except (struct.error, IndexError, ValueError) as error:
                self.skipped.append((base + offset, f"malformed record of type {kind}: {error}"))
                record = None
            if isinstance(record, list):
                yield from record
            elif record is not None:
                yield record
            offset += size
        if offset < end and end <= len(buffer):
            self.skipped.append((base + offset, "trailing bytes in the data section"))
        elif end > len(buffer):
            self.skipped.append((base + len(buffer), "data section truncated"))

    def _attr_for(self, buffer: memoryview, offset: int, size: int, kind: int) -> EventAttr:
        if len(self.attrs) == 1:
            return self.attrs[0]
        attr = self.attrs[0]
        if attr.sample_type & SAMPLE_IDENTIFIER:
            if kind == RECORD_SAMPLE:
                identifier = _U64.unpack_from(buffer, offset + 8)[0]
            else:
                identifier = _U64.unpack_from(buffer, offset + size - 8)[0]
            return self._by_id.get(identifier, attr)
        return attr

    def _record(self, buffer: memoryview, kind: int, misc: int, offset: int, size: int,
                base: int) -> Record | list[Record] | None:
        if kind == RECORD_SAMPLE:
            return self._sample(buffer, misc, offset, size, base)
        if kind in (RECORD_MMAP, RECORD_MMAP2):
            return self._mmap(buffer, kind, misc, offset, size, base)
        if kind == RECORD_COMM:
            pid, tid = struct.unpack_from("<II", buffer, offset + 8)
            name_end = offset + size - self._trailer_size()
            name = bytes(buffer[offset + 16:name_end]).split(b"\0", 1)[0].decode("utf-8",
                                                                                  "replace")
            return Comm(base + offset, pid, tid, name, bool(misc & 0x2000),
                        self._trailer_time(buffer, offset, size))
        if kind in (RECORD_FORK, RECORD_EXIT):
            pid, ppid, tid, ptid, time = struct.unpack_from("<IIIIQ", buffer, offset + 8)
            return Task(base + offset, pid, ppid, tid, ptid, time, kind == RECORD_EXIT)
        if kind == RECORD_LOST:
            _, lost = struct.unpack_from("<QQ", buffer, offset + 8)
            return Lost(base + offset, lost, self._trailer_time(buffer, offset, size))
        if kind == RECORD_LOST_SAMPLES:
            lost = _U64.unpack_from(buffer, offset + 8)[0]
            return Lost(base + offset, lost, self._trailer_time(buffer, offset, size))
        if kind == RECORD_FINISHED_ROUND:
            return FinishedRound(base + offset)
        if kind == RECORD_COMPRESSED:
            return list(self._decompress(buffer, offset, size, base))
        return None

    def _trailer_size(self) -> int:
        attr = self.attrs[0]
        if not attr.sample_id_all:
            return 0
        sample_type = attr.sample_type
        size = 0
        for bit in (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU,
                    SAMPLE_IDENTIFIER):
            if sample_type & bit:
                size += 8
        return size

    def _trailer_time(self, buffer: memoryview, offset: int, size: int) -> int:
        """The TIME field of the sample_id_all trailer of a non-sample record (0 if none)."""
        attr = self.attrs[0]
        if not attr.sample_id_all or not attr.sample_type & SAMPLE_TIME:
            return 0
        position = offset + size - self._trailer_size()
        if attr.sample_type & SAMPLE_TID:
            position += 8
        return int(_U64.unpack_from(buffer, position)[0])

    def _mmap(self, buffer: memoryview, kind: int, misc: int, offset: int, size: int,
              base: int) -> Mmap:
        pid, tid, start, length, pgoff = struct.unpack_from("<IIQQQ", buffer, offset + 8)
        build_id = None
        prot = flags = 0
        if kind == RECORD_MMAP2:
            if misc & 0x4000:
                id_size = buffer[offset + 40]
                build_id = bytes(buffer[offset + 44:offset + 44 + min(id_size, 20)])
            prot, flags = struct.unpack_from("<II", buffer, offset + 64)
            name_at = offset + 72
        else:
            name_at = offset + 40
        name_end = offset + size - self._trailer_size()
        name = bytes(buffer[name_at:name_end]).split(b"\0", 1)[0].decode("utf-8", "replace")
        executable = not misc & 0x2000 if kind == RECORD_MMAP2 or prot == 0 else bool(prot & 4)
        return Mmap(base + offset, pid, tid, start, length, pgoff, name, prot, flags, build_id,
                    self._trailer_time(buffer, offset, size), executable)

    def _sample(self, buffer: memoryview, misc: int, offset: int, size: int,
                base: int) -> Sample:
        attr = self._attr_for(buffer, offset, size, RECORD_SAMPLE)
        sample_type = attr.sample_type
        end = offset + size
        position = offset + 8
        sample = Sample(base + offset, misc, attr=attr)
        unpack = _U64.unpack_from
        if sample_type & SAMPLE_IDENTIFIER:
            position += 8
        if sample_type & SAMPLE_IP:
            sample.ip = unpack(buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_TID:
            sample.pid, sample.tid = struct.unpack_from("<II", buffer, position)
            position += 8
        if sample_type & SAMPLE_TIME:
            sample.time = unpack(buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_ADDR:
            sample.addr = unpack(buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_ID:
            sample.id = unpack(buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_STREAM_ID:
            position += 8
        if sample_type & SAMPLE_CPU:
            sample.cpu = struct.unpack_from("<I", buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_PERIOD:
            sample.period = unpack(buffer, position)[0]
            position += 8
        if sample_type & SAMPLE_READ:
            raise ValueError("PERF_SAMPLE_READ is not supported")
        if sample_type & SAMPLE_CALLCHAIN:
            count = unpack(buffer, position)[0]
            position += 8
            if position + 8 * count > end:
                raise ValueError(f"callchain of {count} entries runs past the record")
            sample.callchain = struct.unpack_from(f"<{count}Q", buffer, position)
            position += 8 * count
        if sample_type & SAMPLE_RAW:
            raw_size = struct.unpack_from("<I", buffer, position)[0]
            position += 4 + raw_size
        if sample_type & SAMPLE_BRANCH_STACK:
            count = unpack(buffer, position)[0]
            position += 8 + 24 * count
        if sample_type & SAMPLE_REGS_USER:
            sample.regs_abi = unpack(buffer, position)[0]
            position += 8
            if sample.regs_abi:
                count = attr.sample_regs_user.bit_count()
                if position + 8 * count > end:
                    raise ValueError("user registers run past the record")
                sample.regs = struct.unpack_from(f"<{count}Q", buffer, position)
                position += 8 * count
        if sample_type & SAMPLE_STACK_USER:
            stack_size = unpack(buffer, position)[0]
            position += 8
            if stack_size:
                if position + stack_size + 8 > end:
                    raise ValueError(f"user stack of {stack_size} bytes runs past the record")
                dyn_size = unpack(buffer, position + stack_size)[0]
                sample.stack_dyn_size = min(dyn_size, stack_size)
                sample.stack = buffer[position:position + sample.stack_dyn_size]
                position += stack_size + 8
        return sample

    def _decompress(self, buffer: memoryview, offset: int, size: int,
                    base: int) -> Iterator[Record]:
        try:
            import zstandard
        except ImportError:
            self.skipped.append((base + offset, "PERF_RECORD_COMPRESSED needs the zstandard "
                                 "package (pip install zstandard)"))
            return
        payload = bytes(buffer[offset + 8:offset + size])
        # perf compresses one zstd stream across all its compressed records: decode them
        # with one streaming decompressor, in file order.
        if self._zstd is None:
            self._zstd = zstandard.ZstdDecompressor().decompressobj()
        try:
            data = self._zstd.decompress(payload)
        except zstandard.ZstdError as error:
            self.skipped.append((base + offset, f"undecodable compressed record: {error}"))
            return
        view = memoryview(data)
        yield from self._records(view, 0, len(data), base + offset)


def open_perf_data(path: str) -> PerfData:
    """Map ``path`` and read its header, attributes and feature table."""
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise PerfDataError(f"cannot read: {error.strerror or error}", path=path,
                            unreadable=True) from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size < _HEADER.size:
            raise PerfDataError(f"too short for a perf.data header ({size} bytes)", 0, path=path)
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    buffer = memoryview(mapped)
    try:
        return _parse(path, buffer, mapped)
    except PerfDataError:
        buffer.release()
        mapped.close()
        raise


def _parse(path: str, buffer: memoryview, mapped: mmap.mmap | None) -> PerfData:
    (magic, _, attr_size, attrs_offset, attrs_size, data_offset, data_size, _, _,
     feature_bits) = _HEADER.unpack_from(buffer, 0)
    if magic != MAGIC:
        raise PerfDataError(f"not a perf.data file (magic {magic!r})", 0, path=path)
    size = len(buffer)
    if attr_size < 16 + 96 or attrs_offset + attrs_size > size:
        raise PerfDataError("attribute section out of bounds", 24, path=path)
    attrs = []
    for position in range(attrs_offset, attrs_offset + attrs_size - attr_size + 1, attr_size):
        kind, _, config, _, sample_type, read_format, flags = struct.unpack_from(
            "<IIQQQQQ", buffer, position)
        regs_user, stack_user = struct.unpack_from("<QI", buffer, position + 80)
        ids_offset, ids_size = struct.unpack_from("<QQ", buffer, position + attr_size - 16)
        ids: tuple[int, ...] = ()
        if ids_offset + ids_size <= size and ids_size % 8 == 0:
            ids = struct.unpack_from(f"<{ids_size // 8}Q", buffer, ids_offset)
        attrs.append(EventAttr(kind, config, sample_type, read_format, flags, regs_user,
                               stack_user, ids))
    if not attrs:
        raise PerfDataError("no event attributes", attrs_offset, path=path)
    features: dict[int, tuple[int, int]] = {}
    bits = int.from_bytes(feature_bits, "little")
    table = data_offset + data_size
    index = 0
    for bit in range(256):
        if bits >> bit & 1:
            if table + 16 * (index + 1) <= size:
                features[bit] = struct.unpack_from("<QQ", buffer, table + 16 * index)
            index += 1
    result = PerfData(path, buffer, attrs, data_offset, data_size, features, [], mapped)
    for attr in attrs:
        for identifier in attr.ids:
            result._by_id[identifier] = attr
    if data_offset + data_size > size:
        result.skipped.append((size, f"data section ends {data_offset + data_size - size} bytes "
                               "past the end of the file (truncated recording)"))
    return result


def in_time_order(records: Iterator[Record]) -> Iterator[Record]:
    """Reorder records by time the way perf's ordered-events queue does: at each
    FINISHED_ROUND, release everything older than the newest time of the round before.

    Memory stays bounded by two rounds of records.
    """
    heap: list[tuple[int, int, Record]] = []
    sequence = 0
    previous_round_max = -1
    round_max = -1
    for record in records:
        if isinstance(record, FinishedRound):
            limit = previous_round_max
            while heap and heap[0][0] <= limit:
                yield heapq.heappop(heap)[2]
            previous_round_max = round_max
            continue
        time = getattr(record, "time", 0)
        round_max = max(round_max, time)
        heapq.heappush(heap, (time, sequence, record))
        sequence += 1
    while heap:
        yield heapq.heappop(heap)[2]
