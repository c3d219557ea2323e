"""The recorder's samples, made from the walker's records by copying their frames
(:func:`~pysframe.record.perf_file.sample_record`), are the bytes of a sample spelled out
field by field in perf's order (the layout perf reads in tests/test_record*.py) from the
same fields: over walker records made at random
(in the kernel or not, no kernel frames or more than 127, user frames cut by the record's
end, stack copies with their note, chains finished in user space), and a record too
large for perf refused the same way."""

from __future__ import annotations

import random
import struct

import pytest

from pysframe.record.perf_file import EVENTS, FILE_SAMPLE_TYPE, sample_record, sampling_attr
from pysframe.record.sampler import (
    COPY_HEADER,
    FLAG_IN_KERNEL,
    FLAG_STACK_COPY,
    KERNEL_AT,
    RECORD,
    frames_end,
    user_at,
)
from pysframe.report import perf_data_out as out
from pysframe.report.perf_data_out import (
    MISC_KERNEL,
    MISC_USER,
    PERF_CONTEXT_KERNEL,
    PERF_CONTEXT_USER,
    WriteError,
)
from pysframe.report.walk_note import Way, pack
from pysframe.sources.perf_records import RECORD_SAMPLE
from pysframe.unwind.step import WALKER_STOPS, Stop


def _reference(raw: bytes, user_frames: list[int] | None, finished: tuple[int, Stop] | None,
               frames: int) -> tuple[int, bytes]:
    """The sample as the general writer makes it from the record's fields."""
    (_, flags, pid, tid, time, cpu, kernel_bytes, user_count, reason, ip, _, _, period,
     _) = RECORD.unpack_from(raw)
    kernel = struct.unpack_from(f"<{min(kernel_bytes, 8 * 127) // 8}Q", raw, KERNEL_AT)
    at = user_at(raw)
    user = user_frames if user_frames is not None else struct.unpack_from(
        f"<{min(user_count, max(len(raw) - at, 0) // 8)}Q", raw, at)
    chain: list[int] = []
    if flags & FLAG_IN_KERNEL and kernel:
        chain += [PERF_CONTEXT_KERNEL, *kernel]
    if user and user[0]:
        chain += [PERF_CONTEXT_USER, *user]
    first = kernel[0] if flags & FLAG_IN_KERNEL and kernel else ip
    if finished is not None:
        note = pack(Way.FINISHED, finished[1], finished[0], len(user))
    else:
        uncovered = None
        noted = frames_end(raw, frames)
        if flags & FLAG_STACK_COPY and frames and len(raw) >= noted + 4:
            uncovered = struct.unpack_from("<I", raw, noted)[0]
        note = pack(Way.KERNEL, WALKER_STOPS.get(reason), uncovered, len(user))
    # Spelled out field by field in perf's order (not through full_sample, which the
    # general writer now uses for this sample type too).
    assert FILE_SAMPLE_TYPE == 0x5A7  # IP TID TIME CALLCHAIN CPU PERIOD RAW
    body = struct.pack(f"<QIIQIIQQ{len(chain)}Q", first, pid, tid, time, cpu, 0, period,
                       len(chain), *chain) + note
    return time, out.record(RECORD_SAMPLE, MISC_KERNEL if flags & FLAG_IN_KERNEL
                            else MISC_USER, body)


def _walker_record(rng: random.Random, frames: int) -> bytes:
    flags = rng.choice([0, FLAG_IN_KERNEL]) | rng.choice([0, 0, FLAG_STACK_COPY])
    kernel = rng.choice([0, 0, 1, 5, 40, 127])
    kernel_bytes = 8 * kernel if rng.random() < 0.9 else 8 * 127 + 8 * rng.randint(1, 4)
    users = rng.choice([0, 1, 3, 30, frames])
    user = [rng.choice([0, 0x401000]) if k == 0 and rng.random() < 0.1
            else rng.randrange(1, 1 << 64) for k in range(users)]
    head = RECORD.pack(0, flags, rng.randrange(1 << 31), rng.randrange(1 << 31),
                       rng.randrange(1 << 63), rng.randrange(64), kernel_bytes,
                       users + rng.choice([0, 0, 2]), rng.choice([0, *WALKER_STOPS]),
                       rng.randrange(1 << 64), 0, 0, rng.randrange(1 << 40), 0)
    body = struct.pack(f"<{kernel}Q", *(rng.randrange(1 << 64) for _ in range(kernel)))
    if len(body) < (kernel_bytes & (8 * 127)):
        body += bytes((kernel_bytes & (8 * 127)) - len(body))
    record = head + body + struct.pack(f"<{users}Q", *user)
    if flags & FLAG_STACK_COPY:
        record += COPY_HEADER.pack(rng.randrange(users + 1), 64, 1, 2, 3) + bytes(64)
    return record


@pytest.mark.parametrize("frames", [8, 64])
def test_samples_are_the_general_writers(frames: int) -> None:
    rng = random.Random(frames)
    for _ in range(3000):
        raw = _walker_record(rng, frames)
        if len(raw) < KERNEL_AT + 8 * (min(RECORD.unpack_from(raw)[6], 8 * 127) // 8):
            continue
        finished = None
        user_frames = None
        if rng.random() < 0.2:
            user_frames = [rng.randrange(1, 1 << 64) for _ in range(rng.randint(0, 20))]
            finished = (rng.randint(0, 5), rng.choice(list(WALKER_STOPS.values())))
        for view in (raw, memoryview(raw)):
            assert sample_record(view, user_frames, finished, frames) == _reference(
                raw, user_frames, finished, frames)


def test_a_sample_too_large_for_perf_is_refused_as_the_writer_refuses_it() -> None:
    users = 8200  # more frames than a perf record's 64 KiB holds
    raw = RECORD.pack(0, 0, 1, 1, 1, 0, 0, users, 0, 0x401000, 0, 0, 1, 0) + struct.pack(
        f"<{users}Q", *range(1, users + 1))
    with pytest.raises(WriteError) as ours:
        sample_record(raw, frames=users)
    with pytest.raises(WriteError) as general:
        _reference(raw, None, None, users)
    assert str(ours.value) == str(general.value)


def test_the_sampling_event_asks_the_kernel_for_its_own_chain_only() -> None:
    """Its samples have a callchain (bpf_get_stack reads the kernel part the kernel made
    for the sample) without the user part, which the kernel would otherwise make by frame
    pointers at every sample for nothing (the walker makes the user chain)."""
    callchain, freq, exclude_kernel, exclude_user = 1 << 5, 1 << 10, 1 << 21, 1 << 22
    for period in (None, 10_000):
        attr = sampling_attr(EVENTS["cpu-clock"], 999, period, inherit=True, on_exec=False)
        sample_type, flags = struct.unpack_from("<Q", attr, 24)[0], struct.unpack_from(
            "<Q", attr, 40)[0]
        assert sample_type & callchain
        assert flags & exclude_user and not flags & exclude_kernel
        assert bool(flags & freq) == (period is None)
        assert struct.unpack_from("<Q", attr, 16)[0] == (period or 999)
