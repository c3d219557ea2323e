"""The perf.data file ``sframe record`` writes: one cpu-clock event, samples with kernel and
user callchains, and the side band (MMAP2, COMM, FORK, EXIT) as the kernel wrote it.

What is recorded is chosen here; the bytes are written by the one perf.data writer,
:mod:`pysframe.report.perf_data_out`. Layout: a 104-byte header, the attribute section (one
``perf_event_attr`` of 128 bytes and an empty id array), the data section, and the
BUILD_ID feature (the MMAP2 records carry device and inode, not build ids: see
:data:`~pysframe.record.recorder.SIDE_BAND_FLAGS`).
Sample type IP | TID | TIME | CALLCHAIN | CPU | PERIOD | RAW (the raw data is the walk's
note, :mod:`pysframe.report.walk_note`), ``sample_id_all``: every other record ends with
``{pid, tid, time, cpu}``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator

from ..report import perf_data_out as out
from ..report.perf_data_out import (
    FEATURE_BUILD_ID,
    FLAG_DEFER_CALLCHAIN,
    FLAG_DEFER_OUTPUT,
    MISC_KERNEL,
    MISC_USER,
    PERF_CONTEXT_KERNEL,
    PERF_CONTEXT_USER,
    PERF_CONTEXT_USER_DEFERRED,
    build_id_entry,
    callchain_deferred,
    sample_id_trailer,
)
from ..report.walk_note import Way, pack
from ..unwind.step import WALKER_STOPS, Stop
from .sampler import FLAG_IN_KERNEL, FLAG_STACK_COPY, KERNEL_AT, RECORD, frames_end, user_at

__all__ = ["ATTR_FLAGS", "DEFER_FLAGS", "EVENTS", "EXCLUDE_CALLCHAIN_USER", "FILE_SAMPLE_TYPE",
           "FREQ_FLAG", "SAMPLE_TYPE", "build_id_entry",
           "comm_record", "deferred_record", "event_attr", "kernel_mmap_record", "kernel_text",
           "mmap2_record", "perf_data_chunks", "request_record", "sample_record",
           "sampling_attr", "sampling_flags"]

SAMPLE_TYPE = 0x1A7  # IP TID TIME CALLCHAIN CPU PERIOD: the kernel's events
#: The file's samples: those fields and RAW (the walk's note).
FILE_SAMPLE_TYPE = SAMPLE_TYPE | 0x400
#: attr flags: freq, sample_id_all, mmap, comm, task, exclude_guest (perf sets it), mmap2,
#: comm_exec.
ATTR_FLAGS = ((1 << 10) | (1 << 18) | (1 << 8) | (1 << 9) | (1 << 13) | (1 << 20) | (1 << 23)
              | (1 << 24))
#: ``--defer``: user callchains come in CALLCHAIN_DEFERRED records, written by this event.
DEFER_FLAGS = FLAG_DEFER_CALLCHAIN | FLAG_DEFER_OUTPUT
_U64 = struct.Struct("<Q")
_CONTEXT_KERNEL, _CONTEXT_USER = _U64.pack(PERF_CONTEXT_KERNEL), _U64.pack(PERF_CONTEXT_USER)


#: The events ``-e`` takes: name -> (perf type, config), as perf names them.
EVENTS = {"cpu-clock": (1, 0), "task-clock": (1, 1), "cycles": (0, 0), "instructions": (0, 1),
          "cache-references": (0, 2), "cache-misses": (0, 3), "branches": (0, 4),
          "branch-misses": (0, 5)}


def event_attr(frequency: int, flags: int = ATTR_FLAGS, config: int = 0,
               sample_type: int = FILE_SAMPLE_TYPE, event_type: int = 1) -> bytes:
    """A 128-byte perf_event_attr: event (``event_type``, ``config``; default cpu-clock) at
    ``frequency`` Hz."""
    return out.event_attr(event_type, config, frequency, sample_type, flags)


#: perf_event_attr's ``freq`` bit: sample_period holds a frequency.
FREQ_FLAG = 1 << 10
#: perf_event_attr's ``exclude_callchain_user`` bit. The walker calls bpf_get_stack for
#: the kernel's frames, and the kernel then makes the sample's whole callchain before the
#: program runs (bpf_prepare_sample): without this bit, the user part too, by frame
#: pointers, up to 127 frames read at every sample and never used (a 300-deep recursion
#: built with frame pointers, sampled at 10 kHz: ~3 points of the workload's CPU time).
EXCLUDE_CALLCHAIN_USER = 1 << 22


def sampling_flags(flags: int, period: int | None) -> int:
    """``flags`` with perf's ``freq`` bit cleared when sampling every ``period`` events."""
    return flags & ~FREQ_FLAG if period is not None else flags | FREQ_FLAG


def sampling_attr(event: tuple[int, int], frequency: int, period: int | None, *,
                  inherit: bool, on_exec: bool) -> bytes:
    """The perf_event_attr of the sampling event (its program attached later): disabled
    until enabled, or until the exec of a held command (``on_exec``: enable_on_exec);
    ``inherit``: by the threads and processes the thread starts; no user callchain
    (:data:`EXCLUDE_CALLCHAIN_USER`)."""
    flags = sampling_flags((1 << 0) | ((1 << 1) if inherit else 0)
                            | ((1 << 12) if on_exec else 0) | EXCLUDE_CALLCHAIN_USER, period)
    return event_attr(period or frequency, flags, config=event[1], sample_type=SAMPLE_TYPE,
                      event_type=event[0])


def sample_record(raw: bytes | memoryview, user_frames: list[int] | None = None,
                  finished: tuple[int, Stop] | None = None, frames: int = 0
                  ) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_SAMPLE) of one walker record (``user_frames``: its user
    chain finished in user space from frame ``finished[0]``, instead of the walker's, and
    why that walk ended; ``frames``: the walker's most user frames, where its stack copy
    header lies). The frames are copied as the walker wrote them (little-endian u64s), not
    unpacked and packed again: this runs for every sample, on the recorder's main thread."""
    (_, flags, pid, tid, time, cpu, kernel_bytes, user_count, reason, ip, _, _,
     period, _) = RECORD.unpack_from(raw)
    kernel_count = min(kernel_bytes, 8 * 127) // 8
    kernel_end = KERNEL_AT + 8 * kernel_count
    if len(raw) < kernel_end:
        raise struct.error(f"a walker record of {len(raw)} bytes holds no {kernel_count} "
                           "kernel frames")
    at = user_at(raw)
    view = memoryview(raw)
    user: bytes | memoryview
    if user_frames is not None:
        user_count = len(user_frames)
        user = struct.pack(f"<{user_count}Q", *user_frames)
        first_user = user_frames[0] if user_frames else 0
    else:
        user_count = min(user_count, max(len(raw) - at, 0) // 8)
        user = view[at:at + 8 * user_count]
        first_user = _U64.unpack_from(raw, at)[0] if user_count else 0
    in_kernel = bool(flags & FLAG_IN_KERNEL) and kernel_count > 0
    chain: list[bytes | memoryview] = []
    length = 0
    if in_kernel:
        chain += (_CONTEXT_KERNEL, view[KERNEL_AT:kernel_end])
        length += 1 + kernel_count
    if first_user:  # a kernel thread has no user context (its "user" ip reads 0)
        chain += (_CONTEXT_USER, user)
        length += 1 + user_count
    first = _U64.unpack_from(raw, KERNEL_AT)[0] if in_kernel else ip
    misc = MISC_KERNEL if flags & FLAG_IN_KERNEL else MISC_USER
    if finished is not None:
        note = pack(Way.FINISHED, finished[1], finished[0], user_count)
    else:
        uncovered = None
        if flags & FLAG_STACK_COPY and frames:
            noted = frames_end(raw, frames)  # the copy's note: after the user frames
            if len(raw) >= noted + 4:
                uncovered = struct.unpack_from("<I", raw, noted)[0]
        note = pack(Way.KERNEL, WALKER_STOPS.get(reason), uncovered, user_count)
    return time, out.full_sample(misc, ip=first, pid=pid, tid=tid, time=time, cpu=cpu,
                                 period=period, length=length, chain=b"".join(chain), raw=note)


def request_record(raw: bytes | memoryview) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_SAMPLE) of a ``--defer`` request: the kernel stack, then
    ``USER_DEFERRED`` and the entry's cookie, as perf >= 6.19 writes such a sample."""
    (_, _, pid, tid, time, cpu, kernel_bytes, _, _, _, _, _, period,
     cookie) = RECORD.unpack_from(raw)
    kernel = struct.unpack_from(f"<{min(kernel_bytes, 8 * 127) // 8}Q", raw, KERNEL_AT)
    chain = [PERF_CONTEXT_KERNEL, *kernel] if kernel else []
    chain += [PERF_CONTEXT_USER_DEFERRED, cookie]
    return time, out.sample(FILE_SAMPLE_TYPE, MISC_KERNEL, ip=kernel[0] if kernel else 0,
                            pid=pid, tid=tid, time=time, cpu=cpu, period=period, chain=chain,
                            raw=pack(Way.DEFERRED, None, None, 0))


def deferred_record(raw: bytes | memoryview) -> tuple[int, bytes]:
    """(time, the PERF_RECORD_CALLCHAIN_DEFERRED) of a walk made at the return to user
    space: the cookie and the user stack, with the file's sample_id trailer."""
    (_, _, pid, tid, time, cpu, _, user_count, _, _, _, _, _,
     cookie) = RECORD.unpack_from(raw)
    at = user_at(raw)
    user = struct.unpack_from(f"<{min(user_count, max(len(raw) - at, 0) // 8)}Q", raw, at)
    chain = list(user) if user and user[0] else []  # plain addresses, as perf writes them
    trailer = sample_id_trailer(SAMPLE_TYPE, pid, tid, time, cpu)
    return time, callchain_deferred(cookie, chain, trailer)


def perf_data_chunks(attr: bytes, data_size: int, data: Iterable[bytes],
                     build_ids: Iterable[bytes] = (), event: str | None = None
                     ) -> Iterator[bytes]:
    """The whole file in pieces, its records given as chunks of ``data_size`` bytes:
    header, attribute section, data section, the BUILD_ID feature when ``build_ids``
    (records of :func:`build_id_entry`) are given, and the EVENT_DESC feature naming the
    event ``event`` (as ``-e`` named it) when given: perf prints that name (perf 6.1 and
    7.2 derive different modifiers from the attribute alone: ``cpu-clock:`` and
    ``cpu-clock:H:``)."""
    features = {FEATURE_BUILD_ID: b"".join(build_ids)}
    if event is not None:
        features[out.FEATURE_EVENT_DESC] = out.event_desc([(attr, event)])
    return out.perf_data_chunks([attr], data_size, data, features)


PROT = {"r": 1, "w": 2, "x": 4}


def comm_record(pid: int, tid: int, comm: str, time: int) -> bytes:
    """A COMM record (as perf synthesizes one for a thread that was already running)."""
    return out.comm(pid, tid, comm, sample_id_trailer(SAMPLE_TYPE, pid, tid, time, 0))


def mmap2_record(pid: int, start: int, end: int, pgoff: int, perms: str, device: int,
                 inode: int, path: str, time: int) -> bytes:
    """An MMAP2 record of an existing mapping (from /proc/PID/maps)."""
    prot = sum(PROT.get(flag, 0) for flag in perms[:3])
    flags = 0x01 if perms.endswith("s") else 0x02  # MAP_SHARED / MAP_PRIVATE
    misc = MISC_USER | (0 if "x" in perms else 0x2000)  # MMAP_DATA for non-executable
    return out.mmap2(misc, pid, pid, start, end - start, pgoff, major=os.major(device),
                     minor=os.minor(device), inode=inode, prot=prot, flags=flags,
                     filename=path, trailer=sample_id_trailer(SAMPLE_TYPE, pid, pid, time, 0))


def kernel_mmap_record(text_start: int, text_end: int | None = None) -> bytes:
    """The kernel's text mapping, as perf synthesizes it (``[kernel.kallsyms]_text`` from
    ``_text`` to ``_etext``, else to the top of the address space): perf names kernel
    frames through it."""
    length = (text_end if text_end and text_end > text_start else 1 << 64) - text_start
    return out.mmap(MISC_KERNEL, -1, 0, text_start, length, text_start,
                    "[kernel.kallsyms]_text", sample_id_trailer(SAMPLE_TYPE, -1, 0, 0, 0))


#: The most of /proc/kallsyms read for ``_text`` and ``_etext`` (6 MiB here).
KALLSYMS_MOST = 64 << 20


def kernel_text(path: str = "/proc/kallsyms") -> tuple[int, int | None] | None:
    """(``_text``, ``_etext``) of the running kernel (None when kallsyms hides addresses).
    The file is read whole and searched, not split into lines: ``_etext`` comes near its
    end (line 117k of 122k here), and splitting every line took 60 of the 100 ms."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(KALLSYMS_MOST)
    except OSError:
        return None
    found: dict[str, int] = {}
    for name in ("_text", "_etext"):
        at = data.find(b" " + name.encode() + b"\n")
        if at < 0:
            continue
        fields = data[data.rfind(b"\n", 0, at) + 1:at].split()
        try:
            found[name] = int(fields[0], 16)
        except (IndexError, ValueError):
            continue
    start = found.get("_text")
    return (start, found.get("_etext")) if start else None
