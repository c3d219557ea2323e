"""A perf event's mmap ring buffer, read from user space: the side band of a recording.

Written by hand from ``perf_event_mmap_page`` (no Python library reads one): a control
page whose ``data_head`` (offset 1024) the kernel advances and whose ``data_tail``
(offset 1032) we write back, then ``2^n`` data pages holding records in perf.data's own
format, ``{u32 type, u16 misc, u16 size}`` first; a record may wrap around the end.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator

from ..sources.perf_records import RECORD_HEADER
from .bpf_sys import BpfError, Fd

PAGE = mmap.PAGESIZE
_U64 = struct.Struct("<Q")
HEAD_AT, TAIL_AT = 1024, 1032


class PerfRing:
    """The records of one perf event's ring buffer of ``pages`` data pages."""

    def __init__(self, fd: Fd, pages: int = 64) -> None:
        self.size = pages * PAGE
        try:
            self._map = mmap.mmap(int(fd), PAGE + self.size, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as error:
            raise BpfError(f"mapping the ring buffer of {fd.what} failed: {error.strerror}",
                           error.errno or 0) from None

    def close(self) -> None:
        self._map.close()

    def records(self) -> Iterator[bytes]:
        """Every whole record written so far (copied out), in order."""
        head = _U64.unpack_from(self._map, HEAD_AT)[0]
        tail = _U64.unpack_from(self._map, TAIL_AT)[0]
        while tail + 8 <= head:
            header = self._read(tail, 8)
            _, _, size = RECORD_HEADER.unpack(header)
            if size < 8 or tail + size > head:
                break
            yield self._read(tail, size)
            tail += size
        _U64.pack_into(self._map, TAIL_AT, tail)

    def _read(self, position: int, size: int) -> bytes:
        start = position % self.size
        first = min(size, self.size - start)
        data = self._map[PAGE + start:PAGE + start + first]
        if first < size:
            data += self._map[PAGE:PAGE + size - first]
        return data
