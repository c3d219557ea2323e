"""Core dumps (x86-64 ELF ET_CORE): threads' registers, file mappings and memory.

Registers come from the NT_PRSTATUS notes (one per thread), mappings from
NT_FILE, memory from the PT_LOAD segments (text is usually not in the core:
file-backed code is read from the binaries on disk). The headers and notes come from
:mod:`pysframe.elf.headers`; the notes' contents are decoded here by hand (pyelftools
does not decode ``elf_prstatus``), every offset checked.

The files on disk may not be the ones that were mapped (a program rebuilt since, a
library upgraded): the core keeps the first page of each ELF file it mapped (its
headers, which usually hold the build-id note), so :meth:`CoreFile.build_ids` says
which build id each file had, to check the file on disk against.
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
    ElfError,
    find_build_id,
    iter_notes,
    read_file_header,
    read_program_headers,
)
from ..errors import PysframeError
from ..inputs import load

EM_X86_64 = 62
NT_PRSTATUS = 1
NT_AUXV = 6
NT_FILE = 0x46494C45
AT_ENTRY = 9
_PRSTATUS_PID = 32
_PRSTATUS_REGS = 112
#: How much of a mapped file's start is searched for its build-id note.
_HEADER_BYTES = 1 << 16
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

    def read_bytes(self, address: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``address``, as far as one segment holds them (empty
        when the core has none there)."""
        index = bisect_right(self._starts, address) - 1
        if index < 0 or address >= self._ends[index]:
            return b""
        vaddr, _, offset = self._segments[index]
        at = offset + address - vaddr
        end = min(at + size, offset + self._ends[index] - vaddr, len(self._data))
        return bytes(self._data[at:end]) if at < end else b""


def build_id_in_headers(data: bytes) -> bytes | None:
    """The build id of an ELF file from the first bytes of its image (a page or so: the
    headers and, usually, the notes), or ``None`` when they do not hold one. Only the
    program headers are used: the section headers are at the end of the file."""
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        return None  # not a 64-bit little-endian ELF file (the only kind in our cores)
    head = bytearray(data)
    head[0x28:0x30] = bytes(8)  # e_shoff: no section header table to check or read
    head[0x3C:0x40] = bytes(4)  # e_shnum, e_shstrndx
    try:
        header = read_file_header(head, "")
        areas = [(segment.offset, segment.filesz)
                 for segment in read_program_headers(head, header) if segment.type == PT_NOTE]
    except ElfError:
        return None
    return find_build_id(head, areas, big_endian=False)


class CoreFile:
    def __init__(self, path: str) -> None:
        # A regular file only (not a FIFO, a device, an empty file): one line naming it.
        self.data: bytes | mmap.mmap = load(path)
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

    def build_ids(self) -> dict[str, bytes]:
        """The build id of each mapped file, as the core saw it: from the file's first
        page, kept in the core (files whose first page is not in the core are left out)."""
        found: dict[str, bytes] = {}
        for mapping in sorted(self.mappings, key=lambda m: m.start):
            if mapping.pgoff == 0 and mapping.path not in found:
                build_id = build_id_in_headers(self.memory.read_bytes(mapping.start,
                                                                      _HEADER_BYTES))
                if build_id:
                    found[mapping.path] = build_id
        return found

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
            # Bytes that are not UTF-8 kept as surrogates: the path still opens the file.
            path = (paths[index].decode("utf-8", "surrogateescape") if index < len(paths)
                    else "")
            self.mappings.append(CoreMapping(low, high, page * page_size, path))
