"""Recordings of perf's deferred-callchain ABI (perf >= 6.19), built from a real
``--call-graph dwarf`` recording with the writer of ``sframe defer``
(``pysframe.report.perf_data_out``) and the layout of ``shared/spec`` §2.5: samples without
user registers or stack copy whose callchain ends ``USER_DEFERRED, cookie``, and
CALLCHAIN_DEFERRED records (type 22) carrying the user ips."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from pysframe.report.perf_data_out import (
    PERF_CONTEXT_USER_DEFERRED,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    callchain_deferred,
    defer_attr,
    record,
    rewritten,
    sample_id_trailer,
    sample_parts,
)

SAMPLE = 9


@dataclass
class Plan:
    """What to write for one sample (``index``: its position among the file's samples)."""

    cookie: int
    ips: list[int]
    #: Write the deferred record (False: it was lost).
    record: bool = True
    #: Give the sample this tid (and pid) instead of its own.
    tid: int | None = None
    #: Write the record after this many more samples (0: right after this one).
    delay: int = 0


@dataclass
class Built:
    data: bytes
    #: Per written sample, in file order: (tid, time, kernel ips, plan).
    samples: list[tuple[int, int, list[int], Plan]] = field(default_factory=list)


def deferred_recording(raw: bytes, plan_for: Callable[[int], Plan | None], limit: int) -> Built:
    """The first ``limit`` samples of ``raw`` rewritten by ``plan_for(index)`` (None: the
    sample is dropped); every other record kept."""
    attrs_offset = struct.unpack_from("<Q", raw, 24)[0]
    start, size = struct.unpack_from("<QQ", raw, 40)
    sample_type, = struct.unpack_from("<Q", raw, attrs_offset + 24)
    registers = struct.unpack_from("<Q", raw, attrs_offset + 80)[0].bit_count()
    new_type = sample_type & ~(SAMPLE_REGS_USER | SAMPLE_STACK_USER)
    out: list[bytes] = []
    #: Records to come: [samples still to write before it, cookie, ips, pid, tid].
    pending: list[list[object]] = []
    built = Built(b"")
    offset, end, index = start, start + size, 0
    while offset + 8 <= end:
        kind, misc, length = struct.unpack_from("<IHH", raw, offset)
        chunk = raw[offset:offset + length]
        offset += length
        if kind != SAMPLE:
            out.append(chunk)
            continue
        plan = plan_for(index) if index < limit else None
        index += 1
        if plan is None:
            continue
        chain_start, chain_end, user_start, user_end = sample_parts(chunk, sample_type, registers)
        count, = struct.unpack_from("<Q", chunk, chain_start)
        kernel = list(struct.unpack_from(f"<{count}Q", chunk, chain_start + 8))
        chain = [*kernel, PERF_CONTEXT_USER_DEFERRED, plan.cookie]
        body = bytearray(chunk[8:chain_start] + struct.pack(f"<{len(chain) + 1}Q", len(chain),
                                                            *chain)
                         + chunk[chain_end:user_start] + chunk[user_end:])
        pid, tid = struct.unpack_from("<ii", chunk, 16)
        if plan.tid is not None:
            pid = tid = plan.tid
            struct.pack_into("<ii", body, 8, pid, tid)
        time, = struct.unpack_from("<Q", chunk, 24)
        out.append(record(SAMPLE, misc, bytes(body)))
        built.samples.append((tid, time, [a for a in kernel if a < (1 << 64) - 4095], plan))
        for waiting in pending:
            waiting[0] = int(waiting[0]) - 1  # type: ignore[call-overload]
        if plan.record:
            pending.append([plan.delay, plan.cookie, plan.ips, pid, tid])
        # A record is written (and timed) just after the sample it waits for.
        for item in [item for item in pending if int(item[0]) <= 0]:  # type: ignore[call-overload]
            _, cookie, ips, owner_pid, owner_tid = item
            trailer = sample_id_trailer(new_type, owner_pid, owner_tid, time + 500, 0)  # type: ignore[arg-type]
            out.append(callchain_deferred(cookie, ips, trailer))  # type: ignore[arg-type]
        pending = [item for item in pending if int(item[0]) > 0]  # type: ignore[call-overload]
    built.data = rewritten(raw, b"".join(out), defer_attr)
    return built
