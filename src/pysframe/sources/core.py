"""Core dumps (x86-64 ELF ET_CORE): threads' registers, file mappings and memory.

Registers come from the NT_PRSTATUS notes (one per thread), mappings from
NT_FILE, memory from the PT_LOAD segments (text is usually not in the core:
file-backed code is read from the binaries on disk). The headers and notes come from
:mod:`pysframe.elf.headers`; the notes' contents are decoded here by hand (pyelftools
does not decode ``elf_prstatus``), every offset checked.
"""

from __future__ import annotations

import mmap
import struct
from bisect import bisect_right
from dataclasses import dataclass

from ..elf.headers import (
    ET_CORE,
    PT_LOAD,
    PT_NOTE,
    iter_notes,
    read_file_header,
    read_program_headers,
)
from ..errors import PysframeError

EM_X86_64 = 62
NT_PRSTATUS = 1
NT_AUXV = 6
NT_FILE = 0x46494C45
AT_ENTRY = 9
_PRSTATUS_PID = 32
_PRSTATUS_REGS = 112
_USER_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs "
              "eflags rsp ss fs_base gs_base ds es fs gs").split()


class CoreError(PysframeError, ValueError):
    """Not a usable core file (with the byte offset)."""


@dataclass(slots=True)
class CoreThread:
    tid: int
    registers: dict[str, int]


@dataclass(slots=True)
class CoreMapping:
    start: int
    end: int
    pgoff: int
    path: str


class CoreMemory:
    """8-byte reads from the PT_LOAD segments of the core."""

    __slots__ = ("_data", "_ends", "_segments", "_starts")

    def __init__(self, data: bytes | mmap.mmap, segments: list[tuple[int, int, int]]) -> None:
        self._data = data
        self._segments = sorted(segments)  # (vaddr, filesz, offset)
        self._starts = [vaddr for vaddr, _, _ in self._segments]
        self._ends = [vaddr + size for vaddr, size, _ in self._segments]

    def read(self, address: int) -> int | None:
        index = bisect_right(self._starts, address) - 1
        if index < 0 or address + 8 > self._ends[index]:
            return None
        vaddr, _, offset = self._segments[index]
        at = offset + address - vaddr
        if at + 8 > len(self._data):
            return None
        return int(struct.unpack_from("<Q", self._data, at)[0])


class CoreFile:
    def __init__(self, path: str) -> None:
        try:
            with open(path, "rb") as handle:
                self.data: bytes | mmap.mmap = mmap.mmap(handle.fileno(), 0,
                                                          access=mmap.ACCESS_READ)
        except (OSError, ValueError) as error:
            text = error.strerror if isinstance(error, OSError) else None
            raise CoreError(f"cannot read: {text or error}", path=path,
                            unreadable=True) from None
        data = self.data
        header = read_file_header(data, path)
        if header.elf_class != 64 or header.big_endian:
            raise CoreError("not a 64-bit little-endian ELF file", path=path)
        if header.type != ET_CORE:
            raise CoreError(f"not a core file (ELF type {header.type})", path=path)
        if header.machine != EM_X86_64:
            raise CoreError(f"only x86-64 cores are supported (machine {header.machine})",
                            path=path)
        self.threads: list[CoreThread] = []
        self.mappings: list[CoreMapping] = []
        #: The program's entry point (AT_ENTRY of the saved auxiliary vector), if recorded.
        self.entry: int | None = None
        loads = []
        for segment in read_program_headers(data, header):
            if segment.type == PT_LOAD and segment.filesz:
                loads.append((segment.vaddr, segment.filesz, segment.offset))
            elif segment.type == PT_NOTE:
                if segment.offset + segment.filesz > len(data):
                    raise CoreError("note segment out of bounds", segment.offset, path=path)
                self._notes(path, segment.offset, segment.offset + segment.filesz)
        self.memory = CoreMemory(data, loads)

    def _notes(self, path: str, offset: int, end: int) -> None:
        data = self.data
        position = offset
        for note in iter_notes(data, offset, end - offset, big_endian=False):
            desc, desc_size = note.desc_offset, note.desc_size
            position = desc + ((desc_size + 3) & ~3)
            if note.type == NT_PRSTATUS and desc_size >= _PRSTATUS_REGS + 8 * len(_USER_REGS):
                tid = struct.unpack_from("<i", data, desc + _PRSTATUS_PID)[0]
                values = struct.unpack_from(f"<{len(_USER_REGS)}Q", data, desc + _PRSTATUS_REGS)
                self.threads.append(CoreThread(tid, dict(zip(_USER_REGS, values, strict=True))))
            elif note.type == NT_AUXV:
                for at in range(desc, desc + desc_size - 15, 16):
                    key, value = struct.unpack_from("<QQ", data, at)
                    if key == AT_ENTRY:
                        self.entry = value
            elif note.type == NT_FILE and desc_size >= 16:
                self._file_note(desc, desc + desc_size)
        if position + 12 <= end:
            raise CoreError("truncated note", position, path=path)

    @property
    def executable(self) -> str | None:
        """The path of the main program: the file mapped at the entry point."""
        if self.entry is None:
            return None
        return next((m.path for m in self.mappings if m.start <= self.entry < m.end), None)

    def _file_note(self, start: int, end: int) -> None:
        data = self.data
        count, page_size = struct.unpack_from("<QQ", data, start)
        table = start + 16
        names = table + 24 * count
        if names > end:
            return
        paths = bytes(data[names:end]).split(b"\0")
        for index in range(count):
            low, high, page = struct.unpack_from("<QQQ", data, table + 24 * index)
            path = paths[index].decode("utf-8", "replace") if index < len(paths) else ""
            self.mappings.append(CoreMapping(low, high, page * page_size, path))
