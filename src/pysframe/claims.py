"""Numbers of pieces of work shared out between forked processes: each claimed once, by
whichever process reads it first from a pipe written whole before the fork.

Used by ``script -j`` (its processes claim ranges of samples as they go:
:mod:`pysframe.cli.jobs`) and by a first run's symbols helper (it and the process it was
forked from claim the files to make: :mod:`pysframe.symbolize.symbols_prefetch`). By
hand: two processes sharing one queue of work is what a pipe is.
"""

from __future__ import annotations

import os
import sys

from .fd_io import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

#: The most numbers one pipe holds (4 bytes each, under a pipe's 64 KiB: written whole
#: before the fork, with no reader yet).
MOST = 4096


class Claims:
    """The numbers ``first`` to ``count - 1``, to claim. Each is 4 bytes, and one pipe read
    of 4 takes one whole. The write end is closed before any process reads, so an empty
    pipe reads as its end: nothing waits."""

    def __init__(self, count: int, first: int = 0) -> None:
        if count - first > MOST:
            raise ValueError(f"{count - first} numbers to claim (at most {MOST})")
        self.read_end, write_end = os.pipe()
        try:
            write_all(write_end, b"".join(k.to_bytes(4, sys.byteorder)
                                          for k in range(first, count)))
        finally:
            os.close(write_end)

    def next(self) -> int | None:
        """A number no one has claimed (None: none left, or closed here)."""
        if self.read_end < 0:
            return None
        claimed = os.read(self.read_end, 4)
        return int.from_bytes(claimed, sys.byteorder) if len(claimed) == 4 else None

    def __iter__(self) -> Iterator[int]:
        """The numbers this process claims, one at a time, until none is left."""
        while (number := self.next()) is not None:
            yield number

    def close(self) -> None:
        if self.read_end >= 0:
            os.close(self.read_end)
            self.read_end = -1
