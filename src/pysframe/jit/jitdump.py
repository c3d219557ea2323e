"""perf's jitdump file (``jit-PID.dump``), written by a JIT runtime: one ``JIT_CODE_LOAD``
record per function, each after a ``JIT_CODE_UNWINDING_INFO`` record holding the
function's ``.eh_frame_hdr`` and ``.eh_frame`` (layout: ``shared/spec/jit.md`` section 2 and
perf's ``jitdump-specification.txt``). The file is mapped executable once, the marker
that makes perf record an MMAP of it; timestamps are CLOCK_MONOTONIC (``perf record -k
mono``).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time

from .symfile import JitCode, align_up, eh_frame_bytes

MAGIC, VERSION = 0x4A695444, 1
EM_X86_64 = 62
JIT_CODE_LOAD, JIT_CODE_CLOSE, JIT_CODE_UNWINDING_INFO = 0, 3, 4
HEADER = struct.Struct("<IIIIIIQQ")
RECORD = struct.Struct("<IIQ")


class JitDump:
    """An open ``DIR/jit-PID.dump`` (created, never replaced: O_EXCL)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"jit-{os.getpid()}.dump")
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o644)
        self._file = os.fdopen(fd, "r+b", buffering=0)
        self._file.write(HEADER.pack(MAGIC, VERSION, HEADER.size, EM_X86_64, 0, os.getpid(),
                                     time.monotonic_ns(), 0))
        # The marker: an executable mapping of the file, kept while the dump is open.
        self._marker = mmap.mmap(fd, HEADER.size, mmap.MAP_PRIVATE,
                                 mmap.PROT_READ | mmap.PROT_EXEC)
        self._index = 0

    def code_load(self, function: JitCode) -> None:
        """The function's unwinding information, then its code."""
        self._unwinding_info(function)
        name = function.name.encode() + b"\0"
        body = struct.pack("<IIQQQQ", os.getpid(), threading.get_native_id(), function.address,
                           function.address, len(function.code), self._index)
        self._record(JIT_CODE_LOAD, body + name + function.code)
        self._index += 1

    def _unwinding_info(self, function: JitCode) -> None:
        # perf inject --jit places the unwinding data after the code in the ELF file it
        # makes, at the code's size rounded up to 8 bytes (its .text starts 8-aligned):
        # the .eh_frame's addresses are relative to there, and its .eh_frame_hdr (version
        # 1, pc-relative pointer, data-relative sorted table) follows the .eh_frame.
        eh_address = function.address + align_up(len(function.code), 8)
        eh_frame = eh_frame_bytes([function], eh_address)
        header_at = eh_address + len(eh_frame)
        fde_at = eh_address + _cie_size(eh_frame)
        hdr = (bytes([1, 0x1B, 0x03, 0x3B])
               + struct.pack("<iI", eh_address - (header_at + 4), 1)
               + struct.pack("<ii", function.address - header_at, fde_at - header_at))
        data = eh_frame + hdr  # the header last: perf takes it from the end
        self._record(JIT_CODE_UNWINDING_INFO,
                     struct.pack("<QQQ", len(data), len(hdr), len(data)) + data
                     + bytes(-len(data) % 8))

    def _record(self, kind: int, body: bytes) -> None:
        self._file.write(RECORD.pack(kind, RECORD.size + len(body), time.monotonic_ns()) + body)

    def close(self) -> None:
        self._record(JIT_CODE_CLOSE, b"")
        self._marker.close()
        self._file.close()


def _cie_size(eh_frame: bytes) -> int:
    length: int = struct.unpack_from("<I", eh_frame)[0]
    return 4 + length

