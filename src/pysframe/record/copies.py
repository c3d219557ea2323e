"""The stack copies of samples waiting to be finished, kept in a scratch file.

A busy first ``-a`` run makes thousands of samples wait for tables still being generated,
each with 16 KiB of stack: held in memory, they were bounded at 48 MiB (past that a sample
kept the walker's chain). On disk they cost no memory; each copy's bytes are given back to
the file system once its chain is finished (a hole punched: ``fallocate``, as the file
systems that hold scratch files support), so the file's blocks follow what still waits.
Written and read with ``pwrite``/``pread`` at their own offsets: the polling thread
writes while the table thread reads.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
from collections.abc import Callable

from .procfs import libc_function

#: fallocate(2) modes: free the range, keep the file's size.
_PUNCH_HOLE, _KEEP_SIZE = 0x02, 0x01


class CopyStore:
    """Byte strings put into an unnamed scratch file (``directory``: where; default the
    system's temporary directory) and read back by place."""

    def __init__(self, directory: str | None = None) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)
        self._fd = self._file.fileno()
        self._end = 0
        self._lock = threading.Lock()
        self._fallocate = _fallocate()

    def put(self, data: bytes) -> int:
        """Keep ``data``; returns its place."""
        with self._lock:
            at, self._end = self._end, self._end + len(data)
        view, done = memoryview(data), 0
        while done < len(data):
            done += os.pwrite(self._fd, view[done:], at + done)
        return at

    def get(self, at: int, size: int) -> bytes:
        """The ``size`` bytes kept at ``at`` (fewer only if the file lost them)."""
        return os.pread(self._fd, size, at)

    def drop(self, at: int, size: int) -> None:
        """The bytes at ``at`` are not needed any more: their blocks are freed."""
        if self._fallocate is not None and size > 0:
            self._fallocate(self._fd, _PUNCH_HOLE | _KEEP_SIZE, at, size)

    def close(self) -> None:
        self._file.close()


def _fallocate() -> Callable[[int, int, int, int], int] | None:
    """libc's fallocate, or None where there is none (the blocks are then freed when the
    file is closed)."""
    function = libc_function("fallocate")
    if function is not None:
        function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
        function.restype = ctypes.c_int
    return function
