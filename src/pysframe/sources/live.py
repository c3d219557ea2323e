"""Stacks of a live process through ptrace (x86-64): registers, maps and memory.

Hand-written with ctypes: Python has no ptrace binding. Every thread is
stopped with PTRACE_SEIZE + PTRACE_INTERRUPT (the thread sees no signal),
read, and detached again; :class:`Attached` detaches in ``finally`` on every
path, including errors, Ctrl-C and time-outs, so the target is never left
stopped. Memory is read through ``/proc/PID/mem``, which also reads pages a
guard page would hide from process_vm_readv.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import struct
import time
from dataclasses import dataclass

from ..errors import PysframeError

PTRACE_GETREGS = 12
PTRACE_DETACH = 17
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
WALL = 0x40000000
_HELD_SIGNALS = {signal.SIGINT, signal.SIGALRM, signal.SIGTERM, signal.SIGHUP}

# x86-64 struct user_regs_struct: 27 unsigned longs in this order.
_USER_REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs "
              "eflags rsp ss fs_base gs_base ds es fs gs").split()
#: DWARF numbers of the x86-64 general registers (for register-based rules in frame 0).
_DWARF = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
          **{f"r{n}": n for n in range(8, 16)}}

# The C library already loaded into this process (dlopen(NULL)): ctypes.util.find_library
# would run `ldconfig -p` at every start.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)


class LiveError(PysframeError):
    """A process or thread could not be read (one line, with the errno text)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message, unreadable=True)
        self.errno = code


def _ptrace(request: int, tid: int, address: int = 0, data: object = None) -> int:
    result = _libc.ptrace(request, tid, ctypes.c_void_p(address), data)
    if result == -1:
        code = ctypes.get_errno()
        if code:
            raise LiveError(code, f"ptrace({request:#x}) on thread {tid}: {os.strerror(code)}")
    return int(result)


@dataclass(slots=True)
class MapEntry:
    start: int
    end: int
    perms: str
    pgoff: int
    path: str


def read_maps(pid: int) -> list[MapEntry]:
    entries = []
    with open(f"/proc/{pid}/maps") as handle:
        for line in handle:
            fields = line.split(maxsplit=5)
            start, end = (int(part, 16) for part in fields[0].split("-"))
            path = fields[5].strip() if len(fields) > 5 else ""
            entries.append(MapEntry(start, end, fields[1], int(fields[2], 16), path))
    return entries


class ProcessMemory:
    """Reads 8-byte words of a process through /proc/PID/mem (page cache per walk)."""

    __slots__ = ("_fd", "_pages")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pages: dict[int, bytes | None] = {}

    def read(self, address: int) -> int | None:
        page = address & ~0xFFF
        if address + 8 > page + 0x1000:  # a word across two pages
            raw = self.read_bytes(address, 8)
            return None if raw is None else int.from_bytes(raw, "little")
        data = self._pages.get(page, b"")
        if data == b"":
            try:
                data = os.pread(self._fd, 0x1000, page)
                if len(data) != 0x1000:
                    data = None
            except OSError:
                data = None
            self._pages[page] = data
        if data is None:
            return None
        return int(struct.unpack_from("<Q", data, address - page)[0])

    def read_bytes(self, address: int, size: int) -> bytes | None:
        try:
            data = os.pread(self._fd, size, address)
        except OSError:
            return None
        return data if len(data) == size else None


@dataclass(slots=True)
class ThreadState:
    tid: int
    name: str
    registers: dict[str, int]


class Attached:
    """Context manager: all threads of ``pid`` stopped; detached on exit, whatever happens."""

    def __init__(self, pid: int, timeout: float = 2.0) -> None:
        self.pid = pid
        self.timeout = timeout
        self.stopped: list[int] = []
        self.memory_fd = -1

    def __enter__(self) -> Attached:
        try:
            tids = sorted(int(name) for name in os.listdir(f"/proc/{self.pid}/task"))
        except OSError as error:
            raise LiveError(error.errno or errno.ESRCH,
                            f"process {self.pid}: {error.strerror or error}") from None
        try:
            for tid in tids:
                try:
                    _ptrace(PTRACE_SEIZE, tid)
                except LiveError as error:
                    if error.errno == errno.ESRCH:
                        continue  # the thread exited meanwhile
                    raise
                self.stopped.append(tid)
                _ptrace(PTRACE_INTERRUPT, tid)
            deadline = time.monotonic() + self.timeout
            for tid in self.stopped:
                while True:
                    waited, _ = os.waitpid(tid, os.WNOHANG | WALL)
                    if waited == tid:
                        break
                    if time.monotonic() > deadline:
                        raise LiveError(errno.ETIMEDOUT, f"thread {tid} did not stop in time")
                    time.sleep(0.0005)
            self.memory_fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def threads(self) -> list[ThreadState]:
        out = []
        for tid in self.stopped:
            buffer = (ctypes.c_ulong * len(_USER_REGS))()
            _ptrace(PTRACE_GETREGS, tid, 0, ctypes.byref(buffer))
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as handle:
                    name = handle.read().strip()
            except OSError:
                name = "?"
            out.append(ThreadState(tid, name, dict(zip(_USER_REGS, buffer, strict=True))))
        return out

    def memory(self) -> ProcessMemory:
        return ProcessMemory(self.memory_fd)

    def __exit__(self, *_: object) -> None:
        # Ctrl-C or an alarm during the loop would leave the remaining threads stopped:
        # hold those signals until every thread is detached (their handlers run after).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            if self.memory_fd >= 0:
                os.close(self.memory_fd)
                self.memory_fd = -1
            for tid in self.stopped:
                try:
                    _ptrace(PTRACE_DETACH, tid)
                except LiveError:
                    pass  # gone, or not stopped: nothing left to undo
            self.stopped = []
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def dwarf_registers(registers: dict[str, int]) -> dict[int, int]:
    return {number: registers[name] for name, number in _DWARF.items()}
