"""Reading perf.data files written by ``perf record`` (``--call-graph dwarf`` in particular).

Hand-written: no maintained Python package reads perf.data. The file is
mapped (``mmap``) and read through a ``memoryview``; a sample's copied user
stack is a view into the mapping, never copied. Records are yielded one at a
time, so memory does not grow with the number of samples; :func:`.perf_order.time_ordered`
puts them in the order of ``perf script`` with bounded memory.
Truncated or corrupt files: everything readable is yielded and what had to be
skipped is listed in :attr:`PerfData.skipped` (offset and reason, each once).
Compressed records (``perf record -z``) are inflated with a bound each
(:mod:`.perf_inflate`); the records themselves are parsed by :mod:`.perf_records`.
See ``shared/spec/perf-and-ptrace.md`` §2 for the layout.

Sizes in the file are never trusted: every count, size and offset is checked against the
file (or the record) before it is used, and the counts that size our memory (attributes,
ids) have caps.
"""

from __future__ import annotations

import heapq
import mmap
import os
import struct

from ..errors import PysframeError
from ..inputs import InputError, open_regular
from ..records import field, record_class
from .perf_inflate import DEFAULT_MMAP_LEN, MAX_RECORD_OUTPUT, Inflater, Spill
from .perf_records import (
    COMPRESSED_KINDS,
    RECORD_HEADER,
    RECORD_SAMPLE,
    BuildIdEntry,
    Comm,
    EventAttr,
    FinishedRound,
    Lost,
    Mmap,
    Record,
    RecordParser,
    Sample,
    Task,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

__all__ = [
    "BuildIdEntry", "Comm", "EventAttr", "FinishedRound", "Lost", "Mmap", "PerfData",
    "PerfDataError", "Record", "Sample", "Task", "in_time_order", "is_jitdump",
    "open_perf_data",
]

MAGIC = b"PERFILE2"

FEATURE_BUILD_ID = 2
FEATURE_HOSTNAME = 3
FEATURE_OSRELEASE = 4
FEATURE_VERSION = 5
FEATURE_ARCH = 6
FEATURE_NRCPUS = 7
FEATURE_CMDLINE = 11
FEATURE_EVENT_DESC = 12
FEATURE_SAMPLE_TIME = 21
FEATURE_COMPRESSED = 27

#: Mapped pages further than this behind the reader are dropped (see _release_behind).
RELEASE_MARGIN = 32 * 2**20
RELEASE_STEP = 16 * 2**20
#: Caps on what the header makes us hold: event attributes (perf writes one per event),
#: and sample ids over all attributes (one per CPU or thread and event).
MAX_ATTRS = 1 << 16
MAX_IDS = 1 << 20
#: Entries listed in ``skipped`` at most.
MAX_SKIPPED = 1000
#: Bit 63 of a record's location: the location is in the spill of inflated records.
SPILLED = 1 << 63

_HEADER = struct.Struct("<8sQQQQQQQQ32s")


class PerfDataError(PysframeError, ValueError):
    """The file is not a perf.data file we can read (with the byte offset)."""


@record_class
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
    _parser: RecordParser | None = None
    _released: int = 0
    _seen: set[tuple[int, str]] = field(default_factory=set)
    #: Bytes inflated from compressed records so far (over every pass).
    inflated: int = 0

    def skip(self, offset: int, reason: str) -> None:
        """List what had to be skipped, once (a second pass finds the same), and no more
        than :data:`MAX_SKIPPED` entries (a hostile file could have one per record)."""
        if (offset, reason) in self._seen or len(self.skipped) > MAX_SKIPPED:
            return
        self._seen.add((offset, reason))
        if len(self.skipped) == MAX_SKIPPED:
            reason = f"more than {MAX_SKIPPED} parts skipped; the others are not listed"
        self.skipped.append((offset, reason))

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
        offset, size = extent  # checked against the file when it was opened
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

    @property
    def sample_span(self) -> tuple[int, int] | None:
        """The first and last sample times perf noted (its SAMPLE_TIME feature), or None."""
        data = self._feature(FEATURE_SAMPLE_TIME)
        if data is None or len(data) < 16:
            return None
        first, last = struct.unpack_from("<QQ", data, 0)
        return (first, last) if 0 < first <= last else None

    def build_ids(self) -> list[BuildIdEntry]:
        data = self._feature(FEATURE_BUILD_ID)
        out: list[BuildIdEntry] = []
        if data is None:
            return out
        offset = 0
        while offset + 8 <= len(data):
            _, misc, size = RECORD_HEADER.unpack_from(data, offset)
            if size < 36 or offset + size > len(data):
                self.skip(self.features[FEATURE_BUILD_ID][0] + offset,
                          "malformed build-id record")
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

    def event_names(self) -> list[str]:
        """The events' names in the EVENT_DESC feature, in the order of the attribute section
        (perf pairs them by position): u32 count, u32 attr size, then per event the attr, u32
        id count, the name (u32 length, then the bytes, NUL-padded), the ids. A description
        that does not fit its section ends the list there (the others keep derived names)."""
        view = self._feature(FEATURE_EVENT_DESC)
        names: list[str] = []
        if view is None or len(view) < 8:
            return names
        count, attr_size = struct.unpack_from("<II", view, 0)
        position = 8
        for _ in range(min(count, len(self.attrs))):
            head = position + attr_size
            if head + 8 > len(view):
                break
            ids, length = struct.unpack_from("<II", view, head)
            end = head + 8 + length
            if end + 8 * ids > len(view):
                break
            names.append(bytes(view[head + 8:end]).split(b"\0", 1)[0].decode("utf-8", "replace"))
            position = end + 8 * ids
        return names

    # --- records ----------------------------------------------------------------------

    @property
    def compressed_limit(self) -> int:
        """The most one compressed record may inflate to: the ring-buffer size the recording
        states (its COMPRESSED feature: version, type, level, ratio, ``mmap_len``, u32
        each), clamped to :data:`.perf_inflate.MAX_RECORD_OUTPUT`."""
        data = self._feature(FEATURE_COMPRESSED)
        if data is None or len(data) < 20:
            return DEFAULT_MMAP_LEN
        return min(int(struct.unpack_from("<I", data, 16)[0]), MAX_RECORD_OUTPUT)

    # --- records ----------------------------------------------------------------------

    def records(self, kinds: frozenset[int] | None = None, until: int | None = None
                ) -> Generator[Record, None, None]:
        """Records in file order (compressed records are inflated, from the start of their
        stream at each pass); ``kinds``: only records of these types are parsed (a pass
        that looks for mappings skips the samples unread); ``until``: no record that starts
        at or after this file offset."""
        return self.scan(None, kinds, until)

    def scan(self, spill: Spill | None, kinds: frozenset[int] | None = None,
             until: int | None = None) -> Generator[Record, None, None]:
        """Records in file order; with a ``spill``, inflated records are also written to it
        and their ``offset`` is their location there (:data:`SPILLED` set), for
        :meth:`record_at`. ``kinds``, ``until``: as for :meth:`records`."""
        assert self._parser is not None
        parse = self._parser.parse
        buffer = self.buffer
        offset = self.data_offset
        end = self.data_offset + self.data_size
        size_limit = min(end, len(buffer))
        inflater = Inflater(self.compressed_limit, self.skip)
        self._released = 0
        next_release = offset + RELEASE_STEP
        while offset + 8 <= size_limit:
            if until is not None and offset >= until:
                return  # a partial pass: nothing after it is judged
            if offset >= next_release:
                self._release_behind(offset)
                next_release = offset + RELEASE_STEP
            kind, misc, size = RECORD_HEADER.unpack_from(buffer, offset)
            if size < 8 or offset + size > size_limit:
                self.skip(offset, f"record of type {kind} with size {size} runs past the data "
                          "section; rest of the data skipped")
                break
            if kind in COMPRESSED_KINDS:
                produced = inflater.produced
                data = inflater.inflate(buffer, kind, offset, size)
                self.inflated += inflater.produced - produced
                if data is not None:
                    yield from self._inflated(data, offset, inflater, spill, kinds)
            elif kinds is None or kind in kinds:
                try:
                    record = parse(buffer, kind, misc, offset, size, 0)
                except (struct.error, IndexError, ValueError) as error:
                    self.skip(offset, f"malformed record of type {kind}: {error}")
                    record = None
                if record is not None:
                    yield record
            offset += size
        else:
            if offset < end <= len(buffer):
                self.skip(offset, "trailing bytes in the data section")
        if end > len(buffer):
            self.skip(len(buffer), "data section truncated")
        inflater.finish(min(end, len(buffer)))

    def _inflated(self, data: bytearray, origin: int, inflater: Inflater,
                  spill: Spill | None, kinds: frozenset[int] | None = None
                  ) -> Iterator[Record]:
        """The complete records of one compressed record's output (the incomplete one at
        its end is carried over to the next). Their ``offset``: the compressed record's
        file offset plus their position in ``data`` (or their location in the spill)."""
        assert self._parser is not None
        parse = self._parser.parse
        view = memoryview(data)
        base = origin if spill is None else SPILLED | spill.add(data, origin)
        offset, end = 0, len(view)
        while offset + 8 <= end:
            kind, misc, size = RECORD_HEADER.unpack_from(view, offset)
            if size < 8:
                self.skip(origin, f"record of type {kind} with size {size} in the output of a "
                          "compressed record; the rest of its output skipped")
                return
            if offset + size > end:
                break
            if kind in COMPRESSED_KINDS:
                self.skip(origin, "a compressed record inside compressed data; skipped")
            elif kinds is None or kind in kinds:
                try:
                    record = parse(view, kind, misc, offset, size, base)
                except (struct.error, IndexError, ValueError) as error:
                    self.skip(origin, f"malformed record of type {kind} in the output of a "
                              f"compressed record: {error}")
                    record = None
                if record is not None:
                    yield record
            offset += size
        inflater.keep(bytes(view[offset:]))

    def samples_ahead(self, offset: int, count: int, span: int
                      ) -> tuple[dict[tuple[int, int], None], int | None]:
        """(pid, ip) of the next ``count`` samples from the file's record at ``offset``, in
        its next ``span`` bytes at most (see :meth:`.perf_records.RecordParser.ahead`:
        the pages glanced at stay mapped until the reading releases them, as it does the
        pages behind it), and where the glance stopped (None: no later glance, as in a
        compressed recording, whose records' offsets are not the file's, or before the
        records are read)."""
        if (self._parser is None or self.inflated or not self.data_offset <= offset
                or self._feature(FEATURE_COMPRESSED) is not None):
            return {}, None
        data_end = min(self.data_offset + self.data_size, len(self.buffer))
        found, stopped = self._parser.ahead(self.buffer, offset, min(data_end, offset + span),
                                            count)
        return found, stopped if stopped is not None and stopped + 8 <= data_end else None

    def follow(self, on: bool) -> None:
        """Samples read from now on are only followed, or again read whole (see
        :meth:`.perf_records.RecordParser.follow`)."""
        if self._parser is not None:
            self._parser.follow(on)

    def record_at(self, location: int, spill: Spill | None) -> Record | None:
        """The record at a location :meth:`scan` gave (read again; None if it no longer
        parses, which a file changed under us could cause)."""
        assert self._parser is not None
        buffer = self.buffer
        base = 0
        if location & SPILLED:
            location &= ~SPILLED
            if spill is None or spill.view is None:
                return None
            buffer = spill.view
            base = spill.origin(location)
        try:
            kind, misc, size = RECORD_HEADER.unpack_from(buffer, location)
            return self._parser.parse(buffer, kind, misc, location, size, base)
        except (struct.error, IndexError, ValueError):
            return None

    def _release_behind(self, offset: int) -> None:
        """Drop the mapped pages well behind the read position from our resident set.

        The file is mapped, so every page read stays resident and the peak RSS would
        grow with the file; records more than ``RELEASE_MARGIN`` behind are done with
        (time ordering holds at most :data:`.perf_order.PENDING_BYTES` of stacks). Touching
        such a page again is still correct: it is read back from the file.
        """
        self.release_before(offset - RELEASE_MARGIN)

    def release_range(self, start: int, end: int) -> None:
        """Drop the mapped pages of bytes ``start`` to ``end`` from our resident set."""
        mapped = self._map
        if mapped is None or not hasattr(mapped, "madvise"):
            return
        first = max(start, 0) & ~(mmap.PAGESIZE - 1)
        last = min(end, len(mapped)) & ~(mmap.PAGESIZE - 1)
        if last > first:
            try:
                mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
            except (OSError, ValueError):
                return

    def release_before(self, offset: int, from_start: bool = False) -> None:
        """Drop the mapped pages of the file before ``offset`` from our resident set (those
        not dropped before, or all with ``from_start``)."""
        mapped = self._map
        if mapped is None or not hasattr(mapped, "madvise"):
            return
        if from_start:
            self._released = 0
        end = min(offset, len(mapped)) & ~(mmap.PAGESIZE - 1)
        if end > self._released:
            try:
                mapped.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            except (OSError, ValueError):
                return
            self._released = end


def estimated_samples(data: PerfData, records: int = 512) -> int:
    """The samples of ``data``: counted in its first ``records`` records, in proportion to
    the bytes of the data section for the rest; 0 for a recording with compressed records
    or a record that runs past the data (the count then says nothing of the rest)."""
    buffer, offset = data.buffer, data.data_offset
    end = min(data.data_offset + data.data_size, len(buffer))
    samples = 0
    for _ in range(records):
        if offset + 8 > end:
            return samples
        kind, _misc, size = RECORD_HEADER.unpack_from(buffer, offset)
        if size < 8 or offset + size > end or kind in COMPRESSED_KINDS:
            return 0
        samples += kind == RECORD_SAMPLE
        offset += size
    return samples * (end - data.data_offset) // (offset - data.data_offset)


def is_jitdump(path: str) -> bool:
    """Whether ``path`` has the name perf's runtimes give the dump, ``jit-<pid>.dump``
    (the marker mapping names it). Here, where MMAP records are read, not beside the dump's
    reader (:mod:`.jitdump`, ~0.35 ms to import, which a recording without a dump does
    not need). Not a regular expression: ``re`` costs ~2.5 ms of a small recording's
    start-up."""
    name = path.rpartition("/")[2]
    return name.startswith("jit-") and name.endswith(".dump") and name[4:-5].isdecimal()


def open_perf_data(path: str) -> PerfData:
    """Map ``path`` (a regular file only: a FIFO or a device is refused before any read)
    and read its header, attributes and feature table."""
    try:
        fd, status = open_regular(path)
    except InputError as error:
        raise PerfDataError(error.message, path=path, unreadable=True) from None
    try:
        size = status.st_size
        if size < _HEADER.size:
            raise PerfDataError(f"too short for a perf.data header ({size} bytes)", 0, path=path)
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
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
    if attrs_size // attr_size > MAX_ATTRS:
        raise PerfDataError(f"{attrs_size // attr_size} event attributes (at most {MAX_ATTRS})",
                            32, path=path)
    skipped: list[tuple[int, str]] = []
    attrs = _attributes(buffer, attr_size, attrs_offset, attrs_size, skipped)
    if not attrs:
        raise PerfDataError("no event attributes", attrs_offset, path=path)
    result = PerfData(path, buffer, attrs, data_offset, data_size, {}, [], mapped,
                      RecordParser(attrs))
    for offset, reason in skipped:
        result.skip(offset, reason)
    if data_offset + data_size > size:
        result.skip(size, f"data section ends {data_offset + data_size - size} bytes past the "
                    "end of the file (truncated recording)")
    else:
        result.features = _features(result, int.from_bytes(feature_bits, "little"))
        for attr, name in zip(attrs, result.event_names(), strict=False):
            attr.name = name
    return result


def _attributes(buffer: memoryview, attr_size: int, attrs_offset: int, attrs_size: int,
                skipped: list[tuple[int, str]]) -> list[EventAttr]:
    """The event attributes (perf_event_attr, then the ``(offset, size)`` of its ids)."""
    size = len(buffer)
    attrs = []
    id_budget = MAX_IDS
    for position in range(attrs_offset, attrs_offset + attrs_size - attr_size + 1, attr_size):
        kind, _, config, _, sample_type, read_format, flags = struct.unpack_from(
            "<IIQQQQQ", buffer, position)
        branch_type, regs_user, stack_user = struct.unpack_from("<QQI", buffer, position + 72)
        ids_offset, ids_size = struct.unpack_from("<QQ", buffer, position + attr_size - 16)
        ids: tuple[int, ...] = ()
        if ids_offset + ids_size <= size and ids_size % 8 == 0:
            if ids_size // 8 > id_budget:
                skipped.append((ids_offset, f"{ids_size // 8} sample ids (at most {MAX_IDS} in "
                                "all); ignored"))
            else:
                ids = struct.unpack_from(f"<{ids_size // 8}Q", buffer, ids_offset)
                id_budget -= len(ids)
        attrs.append(EventAttr(kind, config, sample_type, read_format, flags, regs_user,
                               stack_user, ids, branch_type))
    return attrs


def _features(data: PerfData, bits: int) -> dict[int, tuple[int, int]]:
    """The feature sections that lie whole in the file, by feature bit. A recording cut
    inside its feature section (the table at the end of the data section, then the
    bodies) is listed in ``skipped`` once, at the first piece that is missing."""
    size = len(data.buffer)
    table = data.data_offset + data.data_size
    features: dict[int, tuple[int, int]] = {}
    cut: tuple[int, str] | None = None
    index = 0
    for bit in range(256):
        if not bits >> bit & 1:
            continue
        entry = table + 16 * index
        index += 1
        if entry + 16 > size:
            if cut is None or entry < cut[0]:
                cut = (entry, f"recording cut inside its feature table (entry {index - 1} of "
                       f"{bits.bit_count()}, for feature {bit}, ends past the end of the file "
                       f"at {size:#x})")
            break
        offset, length = struct.unpack_from("<QQ", data.buffer, entry)
        if offset + length > size:
            if cut is None or offset < cut[0]:
                cut = (offset, f"recording cut inside its feature section (feature {bit}, "
                       f"{length} bytes, ends past the end of the file at {size:#x})")
            continue
        features[bit] = (offset, length)
    if cut is not None:
        data.skip(*cut)
    return features


def in_time_order(records: Iterator[Record]) -> Iterator[Record]:
    """Reorder records by time the way perf's ordered-events queue does: at each
    FINISHED_ROUND, release everything older than the newest time of the round before.

    Memory stays bounded by two rounds of records, and grows with the recording when it
    has no FINISHED_ROUND records: :func:`.perf_order.time_ordered` gives the same order
    with bounded memory in every case.
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
