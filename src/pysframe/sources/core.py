"""Core dumps (ELF ET_CORE of x86-64, AArch64 or s390x): threads' registers, file mappings
and memory.

Registers come from the NT_PRSTATUS notes (one per thread; ``pr_reg`` laid out per machine
as the kernel's ``elf_gregset_t``: :data:`USER_REGS`), mappings from NT_FILE, memory from
the PT_LOAD segments (text is usually not in the core:
file-backed code is read from the binaries on disk). The headers and notes come from
:mod:`pysframe.elf.headers`; the notes' contents are decoded here by hand (pyelftools
does not decode ``elf_prstatus``), every offset checked.

The files on disk may not be the ones that were mapped (a program rebuilt since, a
library upgraded): the core keeps the first page of each ELF file it mapped (its
headers, which usually hold the build-id note), so :meth:`CoreFile.build_ids` says
which build id each file had, to check the file on disk against.

A core written by qemu-user (``qemu_PROG_TIME_PID.core``) has no NT_FILE note and none of
the files' first pages: the files the process had loaded are then read from the dynamic
loader's list in the core's memory (:meth:`CoreFile.loaded_objects`: ``r_debug`` found
through the program's ``DT_DEBUG``, then its ``link_map`` chain), as gdb does.
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
EM_AARCH64 = 183
EM_S390 = 22
NT_PRSTATUS = 1
NT_PRPSINFO = 3
NT_AUXV = 6
NT_FILE = 0x46494C45
AT_PHDR = 3
AT_ENTRY = 9
AT_EXECFN = 31
DT_DEBUG = 21
_PRSTATUS_PID = 32
_PRSTATUS_REGS = 112
#: How much of a mapped file's start is searched for its build-id note.
_HEADER_BYTES = 1 << 16
#: ``pr_reg`` of NT_PRSTATUS per machine: the registers' names in order (8 bytes each).
#: x86-64 ``struct user_regs_struct``; AArch64 ``struct user_pt_regs`` (x0-x30, sp, pc,
#: pstate); s390x ``s390_regs`` (PSW mask and address, r0-r15; the 32-bit access registers
#: and orig_gpr2 after them are not read).
USER_REGS = {
    EM_X86_64: ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs "
                "eflags rsp ss fs_base gs_base ds es fs gs").split(),
    EM_AARCH64: [*(f"x{n}" for n in range(31)), "sp", "pc", "pstate"],
    EM_S390: ["pswm", "pswa", *(f"r{n}" for n in range(16))],
}
#: The machines whose cores are read, and their byte order (big-endian: True).
MACHINES = {EM_X86_64: False, EM_AARCH64: False, EM_S390: True}
#: ``pr_psargs`` in NT_PRPSINFO (the command line, 80 bytes), the same on these machines.
_PRPSINFO_ARGS = 56


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

    __slots__ = ("_data", "_ends", "_segments", "_starts", "_word")

    def __init__(self, data: bytes | mmap.mmap, segments: list[tuple[int, int, int]],
                 big_endian: bool = False) -> None:
        self._data = data
        self._word = struct.Struct(">Q" if big_endian else "<Q")
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
        return int(self._word.unpack_from(self._data, at)[0])

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

    def read_string(self, address: int, limit: int = 4096) -> str | None:
        """The NUL-terminated string at ``address`` (None: unreadable or unterminated)."""
        data = self.read_bytes(address, limit)
        end = data.find(b"\0")
        return data[:end].decode("utf-8", "surrogateescape") if end >= 0 else None


def build_id_in_headers(data: bytes) -> bytes | None:
    """The build id of an ELF file from the first bytes of its image (a page or so: the
    headers and, usually, the notes), or ``None`` when they do not hold one. Only the
    program headers are used: the section headers are at the end of the file."""
    if len(data) < 64 or data[:5] != b"\x7fELF\x02" or data[5] not in (1, 2):
        return None  # not a 64-bit ELF file (the only kind in our cores)
    head = bytearray(data)
    head[0x28:0x30] = bytes(8)  # e_shoff: no section header table to check or read
    head[0x3C:0x40] = bytes(4)  # e_shnum, e_shstrndx
    try:
        header = read_file_header(head, "")
        areas = [(segment.offset, segment.filesz)
                 for segment in read_program_headers(head, header) if segment.type == PT_NOTE]
    except ElfError:
        return None
    return find_build_id(head, areas, big_endian=data[5] == 2)


class CoreFile:
    def __init__(self, path: str) -> None:
        # A regular file only (not a FIFO, a device, an empty file): one line naming it.
        self.data: bytes | mmap.mmap = load(path)
        data = self.data
        header = read_file_header(data, path)
        if header.elf_class != 64:
            raise CoreError("not a 64-bit ELF file", path=path)
        if header.type != ET_CORE:
            raise CoreError(f"not a core file (ELF type {header.type})", path=path)
        if MACHINES.get(header.machine) is not header.big_endian:
            raise CoreError("only x86-64, AArch64 (little-endian) and s390x cores are "
                            f"supported (machine {header.machine})", path=path)
        #: The ELF machine (EM_X86_64, EM_AARCH64, EM_S390) and byte order.
        self.machine: int = header.machine
        self.big_endian: bool = header.big_endian
        self._regs = USER_REGS[header.machine]
        self._order = ">" if header.big_endian else "<"
        self.threads: list[CoreThread] = []
        self.mappings: list[CoreMapping] = []
        #: The program's entry point (AT_ENTRY of the saved auxiliary vector), if recorded.
        self.entry: int | None = None
        #: The saved auxiliary vector (NT_AUXV), by AT_ number.
        self.auxv: dict[int, int] = {}
        #: The command line as NT_PRPSINFO keeps it (its first 80 bytes).
        self.arguments = ""
        #: The types of the notes the core holds (e.g. NT_ARM_PAC_MASK, 0x406).
        self.note_types: set[int] = set()
        loads = []
        for segment in read_program_headers(data, header):
            if segment.type == PT_LOAD and segment.filesz:
                loads.append((segment.vaddr, segment.filesz, segment.offset))
            elif segment.type == PT_NOTE:
                if segment.offset + segment.filesz > len(data):
                    raise CoreError("note segment out of bounds", segment.offset, path=path)
                self._notes(path, segment.offset, segment.offset + segment.filesz)
        self.memory = CoreMemory(data, loads, header.big_endian)

    def _notes(self, path: str, offset: int, end: int) -> None:
        data = self.data
        position = offset
        order, names = self._order, self._regs
        for note in iter_notes(data, offset, end - offset, big_endian=self.big_endian):
            desc, desc_size = note.desc_offset, note.desc_size
            position = desc + ((desc_size + 3) & ~3)
            self.note_types.add(note.type)
            if note.type == NT_PRSTATUS and desc_size >= _PRSTATUS_REGS + 8 * len(names):
                tid = struct.unpack_from(f"{order}i", data, desc + _PRSTATUS_PID)[0]
                values = struct.unpack_from(f"{order}{len(names)}Q", data,
                                            desc + _PRSTATUS_REGS)
                self.threads.append(CoreThread(tid, dict(zip(names, values, strict=True))))
            elif note.type == NT_PRPSINFO and desc_size >= _PRPSINFO_ARGS + 80:
                raw = bytes(data[desc + _PRPSINFO_ARGS:desc + _PRPSINFO_ARGS + 80])
                self.arguments = raw.split(b"\0")[0].decode("utf-8", "surrogateescape")
            elif note.type == NT_AUXV:
                for at in range(desc, desc + desc_size - 15, 16):
                    key, value = struct.unpack_from(f"{order}QQ", data, at)
                    self.auxv.setdefault(key, value)
                self.entry = self.auxv.get(AT_ENTRY)
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
    def program_path(self) -> str | None:
        """The program's path as it was started (AT_EXECFN, else the command line's first
        word): maybe relative to the directory it ran in."""
        execfn = self.auxv.get(AT_EXECFN)
        name = self.memory.read_string(execfn) if execfn else None
        words = self.arguments.split()
        return name or (words[0] if words else None)

    def loaded_objects(self, dynamic: int) -> list[tuple[int, str]]:
        """The dynamic loader's list of loaded objects, as (load bias, path) (the program
        first, its path empty), from the program's dynamic section at ``dynamic`` (its
        address in the process): ``DT_DEBUG`` gives ``r_debug``, whose ``r_map`` starts the
        ``link_map`` chain (``l_addr``, ``l_name``, ``l_ld``, ``l_next``). Empty when the
        core does not hold them (a static program, a loader that had not yet started)."""
        read = self.memory.read
        debug = None
        for at in range(dynamic, dynamic + 16 * 512, 16):
            tag = read(at)
            if tag is None or tag == 0:
                break
            if tag == DT_DEBUG:
                debug = read(at + 8)
                break
        link = read(debug + 8) if debug else None
        found: list[tuple[int, str]] = []
        seen: set[int] = set()
        while link and link not in seen and len(found) < 4096:
            seen.add(link)
            bias, name_at, next_link = read(link), read(link + 8), read(link + 24)
            if bias is None or name_at is None:
                break
            found.append((bias, (self.memory.read_string(name_at) or "") if name_at else ""))
            link = next_link
        return found

    @property
    def executable(self) -> str | None:
        """The path of the main program: the file mapped at the entry point."""
        if self.entry is None:
            return None
        return next((m.path for m in self.mappings if m.start <= self.entry < m.end), None)

    def _file_note(self, start: int, end: int) -> None:
        data = self.data
        order = self._order
        count, page_size = struct.unpack_from(f"{order}QQ", data, start)
        table = start + 16
        names = table + 24 * count
        if names > end:
            return
        paths = bytes(data[names:end]).split(b"\0")
        for index in range(count):
            low, high, page = struct.unpack_from(f"{order}QQQ", data, table + 24 * index)
            # Bytes that are not UTF-8 kept as surrogates: the path still opens the file.
            path = (paths[index].decode("utf-8", "surrogateescape") if index < len(paths)
                    else "")
            self.mappings.append(CoreMapping(low, high, page * page_size, path))
