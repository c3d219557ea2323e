"""Reading a BPF ring buffer (``BPF_MAP_TYPE_RINGBUF``) from user space through mmap.

Written by hand from the kernel's layout (no Python library reads one): a consumer page
(our read position, written by us), a producer page (the kernel's write position) and the
data area, mapped twice in a row so that a record that wraps reads as one slice. Each
record starts with ``{u32 length | BUSY << 31 | DISCARD << 30, u32 page offset}`` and is
padded to 8 bytes.
"""

from __future__ import annotations

import mmap
import select
import struct
from collections.abc import Iterator

from .bpf_sys import Fd

PAGE = mmap.PAGESIZE
BUSY, DISCARD = 1 << 31, 1 << 30
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<I")


class RingBuffer:
    """The consumer side of one ring buffer map of ``size`` bytes (a power of two, a
    multiple of the page size)."""

    def __init__(self, fd: Fd, size: int) -> None:
        self.size = size
        self._fd = fd
        self._consumer = mmap.mmap(int(fd), PAGE, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._data = mmap.mmap(int(fd), PAGE + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ,
                               offset=PAGE)
        self._poll = select.poll()
        self._poll.register(int(fd), select.POLLIN)

    def close(self) -> None:
        self._consumer.close()
        self._data.close()

    def wait(self, timeout_ms: int) -> None:
        """Until there is data (or the time passes, or a signal comes)."""
        try:
            self._poll.poll(timeout_ms)
        except InterruptedError:
            pass

    def records(self) -> Iterator[bytes]:
        """Every record written so far, in order; each is consumed once read."""
        consumer = _U64.unpack_from(self._consumer, 0)[0]
        producer = _U64.unpack_from(self._data, 0)[0]
        mask = self.size - 1
        while consumer < producer:
            at = PAGE + (consumer & mask)
            word = _HEADER.unpack_from(self._data, at)[0]
            if word & BUSY:
                break
            length = word & ~(BUSY | DISCARD)
            if not word & DISCARD:
                yield self._data[at + 8:at + 8 + length]
            consumer += (length + 8 + 7) & ~7
            _U64.pack_into(self._consumer, 0, consumer)
