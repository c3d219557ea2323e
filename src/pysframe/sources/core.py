"""Core dumps (x86-64 ELF ET_CORE): threads' registers, file mappings and memory.

Registers come from the NT_PRSTATUS notes (one per thread), mappings from
NT_FILE, memory from the PT_LOAD segments (text is usually not in the core:
file-backed code is read from the binaries on disk). Hand-written: pyelftools
does not decode ``elf_prstatus``; the segments are read with struct, every
offset checked.
"""

from __future__ import annotations

import mmap
import struct
from bisect import bisect_right
from dataclasses import dataclass

PT_LOAD = 1
PT_NOTE = 4
NT_PRSTATUS = 1
NT_AUXV = 6
NT_FILE = 0x46494C45
AT_ENTRY = 9
_PRSTATUS_PID = 32
_PRSTATUS_REGS = 112
_USER_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs "
              "eflags rsp ss fs_base gs_base ds es fs gs").split()


class CoreError(ValueError):
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
        with open(path, "rb") as handle:
            self.data: bytes | mmap.mmap = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        data = self.data
        if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise CoreError(f"{path}: not a 64-bit little-endian ELF file")
        e_type, machine = struct.unpack_from("<HH", data, 16)
        if e_type != 4:
            raise CoreError(f"{path}: not a core file (ELF type {e_type})")
        if machine != 62:
            raise CoreError(f"{path}: only x86-64 cores are supported (machine {machine})")
        phoff = struct.unpack_from("<Q", data, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        if phoff + phnum * phentsize > len(data) or phentsize < 56:
            raise CoreError(f"{path}: program headers out of bounds at offset {phoff:#x}")
        self.threads: list[CoreThread] = []
        self.mappings: list[CoreMapping] = []
        #: The program's entry point (AT_ENTRY of the saved auxiliary vector), if recorded.
        self.entry: int | None = None
        loads = []
        for index in range(phnum):
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from(
                "<IIQQQQQQ", data, phoff + index * phentsize)
            if kind == PT_LOAD and filesz:
                loads.append((vaddr, filesz, offset))
            elif kind == PT_NOTE:
                if offset + filesz > len(data):
                    raise CoreError(f"{path}: note segment out of bounds at offset {offset:#x}")
                self._notes(path, offset, offset + filesz)
        self.memory = CoreMemory(data, loads)

    def _notes(self, path: str, offset: int, end: int) -> None:
        data = self.data
        while offset + 12 <= end:
            name_size, desc_size, kind = struct.unpack_from("<III", data, offset)
            desc = offset + 12 + ((name_size + 3) & ~3)
            following = desc + ((desc_size + 3) & ~3)
            if following > end:
                raise CoreError(f"{path}: truncated note at offset {offset:#x}")
            if kind == NT_PRSTATUS and desc_size >= _PRSTATUS_REGS + 8 * len(_USER_REGS):
                tid = struct.unpack_from("<i", data, desc + _PRSTATUS_PID)[0]
                values = struct.unpack_from(f"<{len(_USER_REGS)}Q", data, desc + _PRSTATUS_REGS)
                self.threads.append(CoreThread(tid, dict(zip(_USER_REGS, values, strict=True))))
            elif kind == NT_AUXV:
                for position in range(desc, desc + desc_size - 15, 16):
                    key, value = struct.unpack_from("<QQ", data, position)
                    if key == AT_ENTRY:
                        self.entry = value
            elif kind == NT_FILE and desc_size >= 16:
                self._file_note(desc, desc + desc_size)
            offset = following

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
