"""The compressed records of ``perf record -z``, inflated with a bound on every one.

How perf writes them (``tools/perf``: ``record__pushfn``, ``zstd_compress_stream_to_records``;
read back by ``perf_session__process_compressed_event``): one zstd stream for the whole
recording, fed one flush of one ring buffer at a time and cut into
PERF_RECORD_COMPRESSED records (type 81: the 8-byte header, then zstd bytes to the end of
the record) or, in a newer perf, PERF_RECORD_COMPRESSED2 (type 83: a u64 ``data_size``, then
that many zstd bytes, the record padded to 8). So:

- One record's output is at most one flush of one ring buffer, whose size the recording
  states in its COMPRESSED feature (``mmap_len``, e.g. 516 KiB). perf itself decompresses
  each record into a buffer of that size (plus the carried bytes below) and can read no
  more: that is our limit per record, clamped to :data:`MAX_RECORD_OUTPUT` whatever the file
  says (:data:`DEFAULT_MMAP_LEN` when the feature is missing). A record whose output
  exceeds it is a bomb: it is skipped (an entry in ``skipped`` naming its offset) after at
  most the limit and one step (below) was produced, and the reading goes on.
- A record of the data may be cut between two compressed records (the output of one ends
  inside it); perf keeps the tail (``decomp_last_rem``) and puts it in front of the next
  record's output, and so do we (at most 64 KiB: a record's size is 16 bits).
- The stream is one zstd frame: once a record is skipped or undecodable, the records after
  it continue a stream we no longer follow. They are skipped (one entry for them all)
  until one starts a new zstd frame.

Decompression is streaming and bounded as it goes: the zstd bytes of a record are fed to
one ``zstandard`` decompression object :data:`SLICE` bytes at a time, and the output is
checked after each (a slice inflates to at most 8 MiB: an RLE block of 4 bytes inflates to
128 KiB). A record's output is held once, bounded, and the records in it are parsed from
it one at a time by the caller. (``zstandard``'s ``stream_writer`` into a sink that raises
at the limit would stop sooner, but leaks its output buffer on every such stop.)
"""

from __future__ import annotations

import mmap
import struct
from bisect import bisect_right

from .perf_records import RECORD_COMPRESSED2

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO, Any

#: Output allowed per compressed record when the recording does not state its buffer size.
DEFAULT_MMAP_LEN = 4 * 2**20
#: Output allowed per compressed record whatever the recording states (the global cap).
MAX_RECORD_OUTPUT = 64 * 2**20

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

#: zstd bytes fed to the decompressor at a time (the bound on one step's output: 8 MiB).
SLICE = 256

if TYPE_CHECKING:
    Skip = Callable[[int, str], None]


def compressed_payload(buffer: memoryview, kind: int, offset: int, size: int) -> memoryview:
    """The zstd bytes of a compressed record (its stated ``data_size`` checked)."""
    if kind == RECORD_COMPRESSED2:
        if size < 16:
            raise ValueError(f"COMPRESSED2 record of {size} bytes has no data size")
        length = struct.unpack_from("<Q", buffer, offset + 8)[0]
        if length > size - 16:
            raise ValueError(f"COMPRESSED2 data size {length} exceeds the record ({size})")
        return buffer[offset + 16:offset + 16 + length]
    return buffer[offset + 8:offset + size]


class Inflater:
    """The compressed records of one pass over a data section, decoded in file order."""

    def __init__(self, limit: int, skip: Skip) -> None:
        self.limit = limit
        self.skip = skip
        #: Bytes the decompressor produced (carried bytes not counted again).
        self.produced = 0
        self._carry = b""
        self._stream: Any = None
        self._module: Any = None
        self._broken_at: int | None = None  # the stream broke at this record
        self._lost_reported = False

    def inflate(self, buffer: memoryview, kind: int, offset: int, size: int) -> bytearray | None:
        """The bytes to parse after the compressed record at ``offset``: the tail carried
        from the record before, then this record's output. None: nothing to parse (the
        record was skipped; why is in ``skipped``)."""
        try:
            payload = compressed_payload(buffer, kind, offset, size)
        except (ValueError, struct.error) as error:
            self._broken(offset, f"malformed compressed record: {error}")
            return None
        if self._stream is None and not self._start(offset, payload):
            return None
        data = bytearray(self._carry)
        room = len(data) + self.limit
        self._carry = b""
        decompress = self._stream.decompress
        try:
            for at in range(0, len(payload), SLICE):
                data += decompress(payload[at:at + SLICE])
                if len(data) > room:
                    self.produced += len(data) - (room - self.limit)
                    self._broken(offset, f"compressed record inflates past {self.limit} bytes, "
                                 "the limit (the recording's ring-buffer size); skipped")
                    return None
        except self._module.ZstdError as error:
            self._broken(offset, f"undecodable compressed record: {error}")
            return None
        self.produced += len(data) - (room - self.limit)
        return data

    def keep(self, tail: bytes) -> None:
        """Carry the incomplete record at the end of an output over to the next one."""
        self._carry = tail

    def finish(self, end: int) -> None:
        """The data section ended at ``end``: a record still incomplete is lost."""
        if self._carry:
            self.skip(end, f"the compressed data ends inside a record ({len(self._carry)} "
                      "of its bytes)")
            self._carry = b""

    def _start(self, offset: int, payload: memoryview) -> bool:
        """A decompressor for the stream (a new one only where a zstd frame starts, once
        the stream broke)."""
        if self._module is None:
            try:
                import zstandard
            except ImportError:
                self._broken_at = offset
                self.skip(offset, "PERF_RECORD_COMPRESSED needs the zstandard package (pip "
                          "install zstandard); the compressed records are skipped")
                self._lost_reported = True
                self._module = False
                return False
            self._module = zstandard
        if not self._module:
            return False
        if self._broken_at is not None and bytes(payload[:4]) != ZSTD_MAGIC:
            if not self._lost_reported:
                self.skip(offset, "compressed records continuing the zstd stream broken at "
                          f"{self._broken_at:#x} skipped (up to a new zstd frame)")
                self._lost_reported = True
            return False
        self._stream = self._module.ZstdDecompressor().decompressobj(read_across_frames=True)
        self._broken_at = None
        self._lost_reported = False
        return True

    def _broken(self, offset: int, reason: str) -> None:
        """The record at ``offset`` is skipped, and the stream is lost with it."""
        self.skip(offset, reason)
        self._stream = None
        self._carry = b""
        self._broken_at = offset


class Spill:
    """A temporary file holding inflated records, so that they can be read again in another
    order without holding them in memory (see :mod:`.perf_order`); mapped once written."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self.size = 0
        from array import array  # (here: array imports collections)

        self._starts = array("Q")
        self._origins = array("Q")
        self._map: mmap.mmap | None = None
        self.view: memoryview | None = None
        self._released = 0

    def add(self, data: bytearray, origin: int) -> int:
        """Append ``data`` inflated from the compressed record at file offset ``origin``;
        its position here."""
        if self._file is None:
            import tempfile  # only here: 5 ms of imports that most runs never need

            self._file = tempfile.TemporaryFile(prefix="sframe-perf-")
        at = self.size
        self._file.write(data)
        self.size += len(data)
        self._starts.append(at)
        self._origins.append(origin)
        return at

    def open(self) -> None:
        """Map what was written, for reading."""
        if self._file is not None and self.size:
            self._file.flush()
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
            self.view = memoryview(self._map)

    def origin(self, position: int) -> int:
        """The file offset of the compressed record that ``position`` was inflated from,
        less the position where its output starts here."""
        index = bisect_right(self._starts, position) - 1
        return int(self._origins[index]) - int(self._starts[index])

    def release_before(self, position: int, from_start: bool = False) -> None:
        """Drop the mapped pages before ``position`` from the resident set (those not
        dropped before, or all with ``from_start``)."""
        if from_start:
            self._released = 0
        end = min(position, self.size) & ~(mmap.PAGESIZE - 1)
        if self._map is not None and end > self._released:
            try:
                self._map.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            except (OSError, ValueError):
                return
            self._released = end

    def close(self) -> None:
        try:
            if self.view is not None:
                self.view.release()
            if self._map is not None:
                self._map.close()
        except BufferError:
            pass  # views from records still alive: the garbage collector closes it later
        if self._file is not None:
            self._file.close()
        self.view = self._map = self._file = None
