"""A recording's records kept in a scratch file as they come, not in memory.

``-a`` for hours writes hundreds of megabytes of samples; held in the recorder's memory
until the end, they made its resident size grow with the recording's length (and the
file was then built whole in memory, twice). The records are appended to an unnamed
file (``O_TMPFILE`` where the file system has it: nothing is left behind if the
recorder dies) beside the output, with a small index in arrays: time, place and size,
16 + 8 + 4 bytes a record. A sample whose chain is finished later has its new record
appended and its index entry pointed at it. At the end, the records are read back in
time order (:meth:`RecordSpool.in_time_order`), a chunk at a time.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator

import numpy as np

from ..fd_io import write_all
from .perf_file import perf_data_chunks

#: Bytes gathered before they are written to the scratch file, and read back per chunk.
BUFFER_BYTES = 1 << 20


class RecordSpool:
    """Records appended with their time; each has a sequence number, its place in the
    order they came (the tie-break of equal times)."""

    def __init__(self, directory: str | None = None) -> None:
        #: Where the scratch file is (None: the system's temporary directory).
        self.directory = directory
        self._file = tempfile.TemporaryFile(dir=directory)
        self._fd = self._file.fileno()
        self._buffer = bytearray()
        self._written = 0
        self._stamps = array("Q")
        self._offsets = array("Q")
        self._sizes = array("I")
        #: The bytes of the records as they stand (a rewritten record counts once).
        self.size = 0

    def __len__(self) -> int:
        return len(self._stamps)

    def append(self, stamp: int, data: bytes) -> int:
        """Keep ``data`` (its time: ``stamp``); returns its sequence number."""
        self._stamps.append(stamp)
        self._offsets.append(self._written + len(self._buffer))
        self._sizes.append(len(data))
        self._buffer += data
        self.size += len(data)
        if len(self._buffer) >= BUFFER_BYTES:
            self._flush()
        return len(self._stamps) - 1

    def replace(self, sequence: int, data: bytes) -> None:
        """The record ``sequence`` is now ``data`` (same time)."""
        self.size += len(data) - self._sizes[sequence]
        self._offsets[sequence] = self._written + len(self._buffer)
        self._sizes[sequence] = len(data)
        self._buffer += data
        if len(self._buffer) >= BUFFER_BYTES:
            self._flush()

    def _flush(self) -> None:
        write_all(self._fd, self._buffer)
        self._written += len(self._buffer)
        self._buffer = bytearray()

    def in_time_order(self) -> Iterator[bytes]:
        """The records in time order (equal times: in the order they came), in chunks of
        about :data:`BUFFER_BYTES`: records next to each other in the file are read in
        one go (they mostly are: the recorder takes them in nearly in time order)."""
        self._flush()
        if not len(self):
            return
        order = np.argsort(np.frombuffer(self._stamps, dtype=np.uint64), kind="stable")
        offsets = np.frombuffer(self._offsets, dtype=np.uint64)[order].astype(np.int64)
        sizes = np.frombuffer(self._sizes, dtype=np.uint32)[order].astype(np.int64)
        ends = offsets + sizes
        chunk_of = np.cumsum(sizes) // BUFFER_BYTES
        breaks = np.flatnonzero((offsets[1:] != ends[:-1]) | (chunk_of[1:] != chunk_of[:-1]))
        firsts = np.concatenate(([0], breaks + 1))
        lasts = np.concatenate((breaks, [len(order) - 1]))
        pending: list[bytes] = []
        gathered = 0
        for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
            at, length = int(offsets[first]), int(ends[last] - offsets[first])
            data = os.pread(self._fd, length, at)
            if len(data) != length:
                raise OSError(f"the recording's scratch file is short at offset {at}")
            pending.append(data)
            gathered += length
            if gathered >= BUFFER_BYTES:
                yield b"".join(pending)
                pending, gathered = [], 0
        if pending:
            yield b"".join(pending)

    def close(self) -> None:
        self._file.close()


class RecordedFile:
    """The perf.data file a recording made, to be written: :attr:`size` bytes, given by
    :meth:`chunks` (once) from the records kept in a scratch file."""

    def __init__(self, spool: RecordSpool, attr: bytes, build_ids: list[bytes],
                 event: str) -> None:
        self._spool, self._attr, self._build_ids, self._event = spool, attr, build_ids, event
        self.size = sum(len(chunk) for chunk in perf_data_chunks(attr, 0, [], build_ids,
                                                                 event)) + spool.size

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from perf_data_chunks(self._attr, self._spool.size,
                                        self._spool.in_time_order(), self._build_ids,
                                        self._event)
        finally:
            self._spool.close()

    def read(self) -> bytes:
        """The whole file (tests and small recordings)."""
        return b"".join(self.chunks())
