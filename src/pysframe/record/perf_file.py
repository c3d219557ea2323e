"""The perf.data file ``sframe record`` writes: one cpu-clock event, samples with kernel and
user callchains, and the side band (MMAP2, COMM, FORK, EXIT) as the kernel wrote it.

Layout from ``shared/spec/perf-and-ptrace.md`` §2: a 104-byte header, the attribute
section (one ``perf_event_attr`` of 128 bytes and an empty id array), the data section,
and no feature sections (build ids travel in the MMAP2 records, recorded with
``build_id``). Sample type IP | TID | TIME | CALLCHAIN | CPU | PERIOD, ``sample_id_all``:
every other record ends with ``{pid, tid, time, cpu}``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable

from ..report.perf_data_out import (
    FLAG_DEFER_CALLCHAIN,
    FLAG_DEFER_OUTPUT,
    PERF_CONTEXT_USER_DEFERRED,
    callchain_deferred,
    sample_id_trailer,
)
from .sampler import FLAG_IN_KERNEL, KERNEL_AT, RECORD, USER_AT

SAMPLE_TYPE = 0x1A7  # IP TID TIME CALLCHAIN CPU PERIOD
#: attr flags: freq, sample_id_all, mmap, comm, task, exclude_guest (perf sets it), mmap2,
#: comm_exec, build_id.
ATTR_FLAGS = ((1 << 10) | (1 << 18) | (1 << 8) | (1 << 9) | (1 << 13) | (1 << 20) | (1 << 23) | (1 << 24)
              | (1 << 34))
#: ``--defer``: user callchains come in CALLCHAIN_DEFERRED records, written by this event.
DEFER_FLAGS = FLAG_DEFER_CALLCHAIN | FLAG_DEFER_OUTPUT
PERF_CONTEXT_KERNEL, PERF_CONTEXT_USER = (1 << 64) - 128, (1 << 64) - 512
RECORD_SAMPLE = 9
_HEADER = struct.Struct("<8sQQQQQQQQ32s")


#: The events ``-e`` takes: name -> (perf type, config), as perf names them.
EVENTS = {"cpu-clock": (1, 0), "task-clock": (1, 1), "cycles": (0, 0), "instructions": (0, 1),
          "cache-references": (0, 2), "cache-misses": (0, 3), "branches": (0, 4),
          "branch-misses": (0, 5)}


def event_attr(frequency: int, flags: int = ATTR_FLAGS, config: int = 0,
               sample_type: int = SAMPLE_TYPE, event_type: int = 1) -> bytes:
    """A 128-byte perf_event_attr: event (``event_type``, ``config``; default cpu-clock) at
    ``frequency`` Hz."""
    attr = bytearray(128)
    struct.pack_into("<IIQQQQQ", attr, 0, event_type, 128, config, frequency, sample_type, 0,
                     flags)
    return bytes(attr)


def sample_record(raw: bytes | memoryview) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_SAMPLE) of one walker record."""
    (_, flags, pid, tid, time, cpu, kernel_bytes, user_count, _, ip, _, _,
     period, _) = RECORD.unpack_from(raw)
    kernel = struct.unpack_from(f"<{min(kernel_bytes, 8 * 127) // 8}Q", raw, KERNEL_AT)
    user = struct.unpack_from(f"<{min(user_count, 127)}Q", raw, USER_AT)
    chain: list[int] = []
    if flags & FLAG_IN_KERNEL and kernel:
        chain += [PERF_CONTEXT_KERNEL, *kernel]
    if user and user[0]:  # a kernel thread has no user context (its "user" ip reads 0)
        chain += [PERF_CONTEXT_USER, *user]
    first = kernel[0] if flags & FLAG_IN_KERNEL and kernel else ip
    body = struct.pack(f"<QIIQIIQQ{len(chain)}Q", first, pid, tid, time, cpu, 0, period,
                       len(chain), *chain)
    misc = 1 if flags & FLAG_IN_KERNEL else 2
    return time, struct.pack("<IHH", RECORD_SAMPLE, misc, 8 + len(body)) + body


def request_record(raw: bytes | memoryview) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_SAMPLE) of a ``--defer`` request: the kernel stack, then
    ``USER_DEFERRED`` and the entry's cookie, as perf >= 6.19 writes such a sample."""
    (_, _, pid, tid, time, cpu, kernel_bytes, _, _, _, _, _, period,
     cookie) = RECORD.unpack_from(raw)
    kernel = struct.unpack_from(f"<{min(kernel_bytes, 8 * 127) // 8}Q", raw, KERNEL_AT)
    chain = [PERF_CONTEXT_KERNEL, *kernel] if kernel else []
    chain += [PERF_CONTEXT_USER_DEFERRED, cookie]
    body = struct.pack(f"<QIIQIIQQ{len(chain)}Q", kernel[0] if kernel else 0, pid, tid, time,
                       cpu, 0, period, len(chain), *chain)
    return time, struct.pack("<IHH", RECORD_SAMPLE, 1, 8 + len(body)) + body


def deferred_record(raw: bytes | memoryview) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_CALLCHAIN_DEFERRED) of a walk made at the return to user
    space: the cookie and the user stack, with the file's sample_id trailer."""
    (_, _, pid, tid, time, cpu, _, user_count, _, _, _, _, _,
     cookie) = RECORD.unpack_from(raw)
    user = struct.unpack_from(f"<{min(user_count, 127)}Q", raw, USER_AT)
    chain = list(user) if user and user[0] else []  # plain addresses, as perf writes them
    trailer = sample_id_trailer(SAMPLE_TYPE, pid, tid, time, cpu)
    return time, callchain_deferred(cookie, chain, trailer)


FEATURE_BUILD_ID = 2


def build_id_entry(build_id: bytes, filename: str, kernel: bool) -> bytes:
    """One record of the BUILD_ID feature: perf's ``build_id_event`` (pid -1: the host)."""
    name = filename.encode("utf-8", "surrogateescape") + b"\0"
    name += bytes(-len(name) % 64)  # perf pads names to 64 bytes
    body = struct.pack("<i", -1) + build_id[:20].ljust(20, b"\0") + bytes(
        [min(len(build_id), 20)]) + bytes(3) + name
    misc = (1 if kernel else 2) | 0x8000  # the size byte is valid
    return struct.pack("<IHH", 0, misc, 8 + len(body)) + body


def perf_data(attr: bytes, records: Iterable[bytes], build_ids: Iterable[bytes] = ()) -> bytes:
    """The whole file: header, attribute section, data section, and the BUILD_ID feature
    when ``build_ids`` (records of :func:`build_id_entry`) are given."""
    data = b"".join(records)
    attrs_at = _HEADER.size
    attr_entry = attr + struct.pack("<QQ", 0, 0)
    data_at = attrs_at + len(attr_entry)
    entries = b"".join(build_ids)
    features = b""
    bitmap = 0
    if entries:
        bitmap |= 1 << FEATURE_BUILD_ID
        body_at = data_at + len(data) + 16  # after the one-entry feature table
        features = struct.pack("<QQ", body_at, len(entries)) + entries
    header = _HEADER.pack(b"PERFILE2", _HEADER.size, len(attr_entry), attrs_at, len(attr_entry),
                          data_at, len(data), 0, 0, bitmap.to_bytes(32, "little"))
    return header + attr_entry + data + features


RECORD_MMAP2, RECORD_COMM = 10, 3
PROT = {"r": 1, "w": 2, "x": 4}


def _trailer(pid: int, tid: int, time: int) -> bytes:
    return struct.pack("<iiQII", pid, tid, time, 0, 0)


def _padded(name: str) -> bytes:
    raw = name.encode("utf-8", "surrogateescape") + b"\0"
    return raw + bytes(-len(raw) % 8)


def comm_record(pid: int, tid: int, comm: str, time: int) -> bytes:
    """A COMM record (as perf synthesizes one for a thread that was already running)."""
    body = struct.pack("<ii", pid, tid) + _padded(comm) + _trailer(pid, tid, time)
    return struct.pack("<IHH", RECORD_COMM, 0, 8 + len(body)) + body


def mmap2_record(pid: int, start: int, end: int, pgoff: int, perms: str, device: int,
                 inode: int, path: str, time: int) -> bytes:
    """An MMAP2 record of an existing mapping (from /proc/PID/maps)."""
    prot = sum(PROT.get(flag, 0) for flag in perms[:3])
    flags = 0x01 if perms.endswith("s") else 0x02  # MAP_SHARED / MAP_PRIVATE
    body = (struct.pack("<iiQQQIIQQII", pid, pid, start, end - start, pgoff,
                        os.major(device), os.minor(device), inode, 0, prot, flags)
            + _padded(path) + _trailer(pid, pid, time))
    misc = 2 | (0 if "x" in perms else 0x2000)  # user; MMAP_DATA for non-executable
    return struct.pack("<IHH", RECORD_MMAP2, misc, 8 + len(body)) + body


RECORD_MMAP = 1


def kernel_mmap_record(text_start: int, text_end: int | None = None) -> bytes:
    """The kernel's text mapping, as perf synthesizes it (``[kernel.kallsyms]_text`` from
    ``_text`` to ``_etext``, else to the top of the address space): perf names kernel
    frames through it."""
    length = (text_end if text_end and text_end > text_start else 1 << 64) - text_start
    body = (struct.pack("<iiQQQ", -1, 0, text_start, length, text_start)
            + _padded("[kernel.kallsyms]_text") + _trailer(-1, 0, 0))
    return struct.pack("<IHH", RECORD_MMAP, 1, 8 + len(body)) + body


def kernel_text(path: str = "/proc/kallsyms") -> tuple[int, int | None] | None:
    """(``_text``, ``_etext``) of the running kernel (None when kallsyms hides addresses)."""
    found: dict[str, int] = {}
    try:
        with open(path) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 3 and fields[2] in ("_text", "_etext"):
                    found[fields[2]] = int(fields[0], 16)
                    if len(found) == 2:
                        break
    except (OSError, ValueError):
        return None
    start = found.get("_text")
    return (start, found.get("_etext")) if start else None
