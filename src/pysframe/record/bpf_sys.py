"""The ``bpf()`` and ``perf_event_open()`` system calls, through ctypes.

Written by hand: no maintained Python package loads BPF programs without a compiler
(bcc needs clang and kernel headers at run time; libbpf's Python bindings are not
packaged). Only what ``sframe record`` uses: maps (array, hash, ring buffer), program
loading with the verifier's log, BTF loading, object ids (to prove nothing is left
behind), perf events and the ioctls that attach a program to one.

Every descriptor is an :class:`Fd` owned by a :class:`Resources` stack that closes them
all, in reverse order, whatever happens (closing the last descriptor of a BPF object
frees it). Errors raise :class:`BpfError` with the call, the errno's name and, for a
program the verifier refused, the end of its log.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
from collections.abc import Iterator

from ..errors import PysframeError

SYS_BPF, SYS_PERF_EVENT_OPEN = 321, 298  # x86-64
# bpf() commands.
MAP_CREATE, MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, MAP_DELETE_ELEM = 0, 1, 2, 3
PROG_LOAD, PROG_GET_NEXT_ID, MAP_GET_NEXT_ID, BTF_LOAD = 5, 11, 12, 18
#: Loads tried before EAGAIN is reported (libbpf tries 5 times).
PROG_LOAD_TRIES = 5
RAW_TRACEPOINT_OPEN, MAP_UPDATE_BATCH = 17, 26
# Map and program types.
MAP_HASH, MAP_ARRAY, MAP_PERCPU_ARRAY, MAP_LRU_HASH, MAP_RINGBUF = 1, 2, 6, 9, 27
PROG_PERF_EVENT, PROG_TRACEPOINT, PROG_RAW_TRACEPOINT = 7, 5, 17
#: map_create flag: an array map whose values can be mapped into memory (Linux 5.5+).
MAP_F_MMAPABLE = 1 << 10
# perf_event ioctls.
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_SET_BPF = 0x2400, 0x2401, 0x40042408
LOG_SIZE = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong)


class BpfError(PysframeError):
    """A bpf() or perf_event_open() call failed; ``errno`` tells why."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.errno = code


def _failure(call: str, code: int, detail: str = "") -> BpfError:
    name = errno.errorcode.get(code, str(code))
    return BpfError(f"{call} failed: {name} ({os.strerror(code)}){detail}", code)


class Fd:
    """An owned file descriptor; closed once."""

    def __init__(self, number: int, what: str) -> None:
        self.number, self.what = number, what

    def close(self) -> None:
        if self.number >= 0:
            number, self.number = self.number, -1
            os.close(number)

    def __int__(self) -> int:
        return self.number


class Resources:
    """Descriptors closed together, last first (``with Resources() as owned: ...``)."""

    def __init__(self) -> None:
        self._owned: list[Fd] = []

    def own(self, fd: Fd) -> Fd:
        self._owned.append(fd)
        return fd

    def close(self) -> None:
        while self._owned:
            try:
                self._owned.pop().close()
            except OSError:
                pass

    def __enter__(self) -> Resources:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def bpf(command: int, attr: bytes | bytearray, call: str) -> int:
    """bpf(command, attr): its non-negative result, or :class:`BpfError`."""
    buffer = ctypes.create_string_buffer(bytes(attr), max(len(attr), 128))
    result = _libc.syscall(SYS_BPF, command, buffer, len(buffer))
    if result < 0:
        raise _failure(call, ctypes.get_errno())
    return int(result)


def map_create(map_type: int, key_size: int, value_size: int, max_entries: int,
               name: str = "", flags: int = 0) -> Fd:
    attr = bytearray(72)
    struct.pack_into("<IIIII", attr, 0, map_type, key_size, value_size, max_entries, flags)
    attr[28:44] = name.encode()[:15].ljust(16, b"\0")
    return Fd(bpf(MAP_CREATE, attr, f"creating BPF map {name or map_type}"), f"map {name}")


def _element(command: int, fd: Fd, key: bytes, value: ctypes.Array[ctypes.c_char] | None,
             flags: int, call: str) -> int:
    key_buffer = ctypes.create_string_buffer(key, len(key))
    attr = bytearray(32)
    struct.pack_into("<IIQQQ", attr, 0, int(fd), 0, ctypes.addressof(key_buffer),
                     ctypes.addressof(value) if value is not None else 0, flags)
    return bpf(command, attr, call)


def map_update(fd: Fd, key: bytes, value: bytes, flags: int = 0) -> None:
    buffer = ctypes.create_string_buffer(value, len(value))
    _element(MAP_UPDATE_ELEM, fd, key, buffer, flags, f"updating {fd.what}")


def map_update_batch(fd: Fd, keys: bytes, values: bytes, count: int) -> None:
    """Store ``count`` elements at once (Linux 5.6+): ``keys`` and ``values`` back to back."""
    key_buffer = ctypes.create_string_buffer(keys, len(keys))
    value_buffer = ctypes.create_string_buffer(values, len(values))
    attr = bytearray(56)
    struct.pack_into("<QQQQIIQQ", attr, 0, 0, 0, ctypes.addressof(key_buffer),
                     ctypes.addressof(value_buffer), count, int(fd), 0, 0)
    bpf(MAP_UPDATE_BATCH, attr, f"updating {fd.what} ({count} elements)")


def map_write(fd: Fd, offset: int, data: bytes) -> None:
    """Write ``data`` at byte ``offset`` of a :data:`MAP_F_MMAPABLE` array map's values,
    through a mapping of just the pages it covers, unmapped at once (not left mapped: the
    whole map's pages would count in the recorder's resident memory). One copy, where
    ``map_update_batch`` copies element by element (a make -j2's dozen tables: ~150 ms)."""
    page = mmap.PAGESIZE
    start = offset - offset % page
    end = -(-(offset + len(data)) // page) * page
    with mmap.mmap(int(fd), end - start, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                   offset=start) as window:
        window[offset - start:offset - start + len(data)] = data


def map_lookup(fd: Fd, key: bytes, value_size: int) -> bytes | None:
    buffer = ctypes.create_string_buffer(value_size)
    try:
        _element(MAP_LOOKUP_ELEM, fd, key, buffer, 0, f"reading {fd.what}")
    except BpfError as error:
        if error.errno == errno.ENOENT:
            return None
        raise
    return buffer.raw


def map_delete(fd: Fd, key: bytes) -> None:
    _element(MAP_DELETE_ELEM, fd, key, None, 0, f"deleting from {fd.what}")


def prog_load(prog_type: int, instructions: bytes, name: str, *, license_text: str = "GPL",
              btf: Fd | None = None, func_info: bytes = b"", func_info_size: int = 8,
              expected_attach_type: int = 0) -> Fd:
    """Load a program; a refusal carries the end of the verifier's log.

    The first try asks for no log, as libbpf does: a log records every instruction the
    verifier walks (130k for the walker), which made loading take ~4 times as long; only
    a refusal is tried again with one, for its message."""
    code = ctypes.create_string_buffer(instructions, len(instructions))
    licence = ctypes.create_string_buffer(license_text.encode())
    log = ctypes.create_string_buffer(LOG_SIZE)
    infos = ctypes.create_string_buffer(func_info, max(len(func_info), 1))
    result, number = -1, 0
    for log_level in (0, 1):
        attr = bytearray(128)
        struct.pack_into("<IIQQIIQI", attr, 0, prog_type, len(instructions) // 8,
                         ctypes.addressof(code), ctypes.addressof(licence), log_level,
                         LOG_SIZE if log_level else 0,
                         ctypes.addressof(log) if log_level else 0, 0)
        attr[48:64] = name.encode()[:15].ljust(16, b"\0")
        struct.pack_into("<I", attr, 68, expected_attach_type)
        if btf is not None:
            struct.pack_into("<IIQI", attr, 72, int(btf), func_info_size,
                             ctypes.addressof(infos), len(func_info) // func_info_size)
        buffer = ctypes.create_string_buffer(bytes(attr), 128)
        # The verifier gives up with EAGAIN when a signal arrives while it works (SIGCHLD,
        # SIGWINCH, a profiler's ptrace stop); libbpf tries again, a few times, and so do we.
        for _ in range(PROG_LOAD_TRIES):
            result = _libc.syscall(SYS_BPF, PROG_LOAD, buffer, 128)
            number = ctypes.get_errno() if result < 0 else 0
            if result >= 0 or number != errno.EAGAIN:
                break
        if result >= 0:
            return Fd(int(result), f"program {name}")
    text = log.value.decode(errors="replace").strip().splitlines()
    raise _failure(f"loading BPF program {name}", number,
                   ": " + " | ".join(text[-6:]) if text else "")


def btf_load(blob: bytes) -> Fd:
    data = ctypes.create_string_buffer(blob, len(blob))
    log = ctypes.create_string_buffer(1 << 16)
    attr = bytearray(32)
    struct.pack_into("<QQII", attr, 0, ctypes.addressof(data), ctypes.addressof(log), len(blob),
                     1 << 16)
    struct.pack_into("<I", attr, 24, 1)
    buffer = ctypes.create_string_buffer(bytes(attr), 128)
    result = _libc.syscall(SYS_BPF, BTF_LOAD, buffer, 128)
    if result < 0:
        code = ctypes.get_errno()
        text = log.value.decode(errors="replace").strip().splitlines()
        raise _failure("loading BTF", code, ": " + " | ".join(text[-4:]) if text else "")
    return Fd(int(result), "BTF")


def raw_tracepoint_open(name: str, program: Fd) -> Fd:
    """Attach ``program`` to the raw tracepoint ``name``; closing the result detaches it."""
    text = ctypes.create_string_buffer(name.encode())
    attr = struct.pack("<QI", ctypes.addressof(text), int(program))
    return Fd(bpf(RAW_TRACEPOINT_OPEN, attr, f"attaching to the tracepoint {name}"),
              f"raw tracepoint {name}")


def object_ids(command: int) -> Iterator[int]:
    """The ids of every loaded program (PROG_GET_NEXT_ID) or map (MAP_GET_NEXT_ID)."""
    current = 0
    while True:
        attr = bytearray(16)
        struct.pack_into("<I", attr, 0, current)
        buffer = ctypes.create_string_buffer(bytes(attr), 128)
        if _libc.syscall(SYS_BPF, command, buffer, 128) < 0:
            return
        current = struct.unpack_from("<I", buffer.raw, 4)[0]
        yield current


def perf_event_open(attr: bytes, pid: int, cpu: int, group: int = -1, flags: int = 8) -> Fd:
    """perf_event_open(attr, pid, cpu, group, flags) (default flag: FD_CLOEXEC)."""
    buffer = ctypes.create_string_buffer(attr, len(attr))
    result = _libc.syscall(SYS_PERF_EVENT_OPEN, buffer, pid, cpu, group, flags)
    if result < 0:
        raise _failure(f"perf_event_open(pid {pid}, cpu {cpu})", ctypes.get_errno())
    return Fd(int(result), f"perf event (pid {pid}, cpu {cpu})")


def ioctl(fd: Fd, request: int, argument: int = 0) -> None:
    if _libc.ioctl(int(fd), request, argument) < 0:
        raise _failure(f"ioctl {request:#x} on {fd.what}", ctypes.get_errno())
