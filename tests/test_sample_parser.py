"""The layout-once sample parser (:func:`pysframe.sources.perf_records.sample_parser`) gives
what the general field-by-field parse gives, for every record: the same Sample, or (for a
malformed one, which it hands back) the same error with the same text. Checked on the
fixture recordings' samples, whose thread, time and period are held to what perf reads
(perf script, run here), and on records made here of every sample type it takes, cut short and with counts
and sizes that run past the record."""

from __future__ import annotations

import struct
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.oracles import need_perf

from conftest import FIXTURES
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_records import (
    RECORD_HEADER,
    RECORD_SAMPLE,
    SAMPLE_ADDR,
    SAMPLE_BRANCH_STACK,
    SAMPLE_CALLCHAIN,
    SAMPLE_CPU,
    SAMPLE_ID,
    SAMPLE_IDENTIFIER,
    SAMPLE_IP,
    SAMPLE_PERIOD,
    SAMPLE_RAW,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_STREAM_ID,
    SAMPLE_TID,
    SAMPLE_TIME,
    EventAttr,
    RecordParser,
    sample_parser,
)

#: The bits a sample type here is made of, in record order (the fixed-size fields first).
FIXED = (SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID,
         SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD)
VARIABLE = (SAMPLE_CALLCHAIN, SAMPLE_REGS_USER, SAMPLE_STACK_USER)


def _outcome(parse: Any) -> tuple[str, Any]:
    try:
        return "sample", parse()
    except (struct.error, IndexError, ValueError) as error:
        return type(error).__name__, str(error)


def _both(parser: RecordParser, attr: EventAttr, buffer: memoryview, misc: int, offset: int,
          size: int, base: int = 0) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """(what the parser gives, what the general parse gives) for the record at ``offset``."""
    return (_outcome(lambda: parser.parse(buffer, RECORD_SAMPLE, misc, offset, size, base)),
            _outcome(lambda: parser._general_sample(attr, buffer, misc, offset, size, base)))


def _perfs_fields(path: Path) -> Counter[tuple[int, int, int]]:
    """(tid, time in microseconds, period) of each sample, as perf reads the recording
    (``perf script -F tid,time,period``, run here)."""
    text = subprocess.run([need_perf(), "script", "-F", "tid,time,period", "-i", str(path)],
                          capture_output=True, text=True, check=True, timeout=120).stdout
    found: Counter[tuple[int, int, int]] = Counter()
    for line in text.splitlines():
        tid, time, period = line.split()
        seconds, micros = time.rstrip(":").split(".")
        found[(int(tid), int(seconds) * 10**6 + int(micros), int(period))] += 1
    return found


@pytest.mark.parametrize(("name", "count"), [("perf.data", 3171), ("perf.fp.data", 3122)])
def test_every_fixture_sample_is_the_general_parse(name: str, count: int) -> None:
    """The dwarf recording (registers and stack copies) and the frame-pointer one
    (neither); the fields both parses give are the ones perf reads (each sample's
    thread, time and period)."""
    path = FIXTURES / "real" / "lua-2.46-x86_64" / name
    parsed: Counter[tuple[int, int, int]] = Counter()
    with open_perf_data(str(path)) as data:
        parser, buffer = data._parser, data.buffer
        assert parser is not None and len(data.attrs) == 1
        attr = data.attrs[0]
        assert sample_parser(attr) is not None  # (both common shapes take it)
        offset, end, samples = data.data_offset, data.data_offset + data.data_size, 0
        while offset + 8 <= end:
            kind, misc, size = RECORD_HEADER.unpack_from(buffer, offset)
            if kind == RECORD_SAMPLE:
                ours, general = _both(parser, attr, buffer, misc, offset, size)
                assert ours == general and ours[0] == "sample", offset
                sample = ours[1]
                parsed[(sample.tid, sample.time // 1000, sample.period)] += 1
                samples += 1
            offset += size
        assert samples == count
    assert parsed == _perfs_fields(path)


def test_types_it_leaves_to_the_general_parse() -> None:
    for bit in (SAMPLE_RAW, SAMPLE_BRANCH_STACK):
        assert sample_parser(EventAttr(1, 0, SAMPLE_IP | bit, 0, 0, 0, 0)) is None


@st.composite
def records(draw: st.DrawFn) -> tuple[EventAttr, bytes, int]:
    """(event, record bytes with 8 bytes of garbage after, the size its header says): a
    well-made sample of a drawn type, then perhaps cut short, one of its count, register
    ABI, stack size or kept-size words moved a little or set to a large value, or the
    header's size changed."""
    sample_type = 0
    for bit in FIXED + VARIABLE:
        if draw(st.booleans()):
            sample_type |= bit
    registers_mask = draw(st.sampled_from([0, 0b111, 0xFF0FFF]))
    words = st.integers(0, 2**64 - 1)
    body = b"".join(struct.pack("<Q", draw(words)) for bit in FIXED if sample_type & bit)
    counts: list[int] = []  # where the words that size what follows lie (in the record)
    if sample_type & SAMPLE_CALLCHAIN:
        chain = draw(st.lists(words, max_size=6))
        counts.append(8 + len(body))
        body += struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
    if sample_type & SAMPLE_REGS_USER:
        abi = draw(st.sampled_from([0, 2]))
        counts.append(8 + len(body))
        body += struct.pack("<Q", abi)
        if abi:
            body += struct.pack("<Q", 7) * registers_mask.bit_count()
    if sample_type & SAMPLE_STACK_USER:
        stack = draw(st.sampled_from([0, 8, 64]))
        counts.append(8 + len(body))
        body += struct.pack("<Q", stack) + bytes(range(stack))
        if stack:
            counts.append(8 + len(body))
            body += struct.pack("<Q", draw(st.sampled_from([0, 8, stack, 2**64 - 1])))
    record = bytearray(RECORD_HEADER.pack(RECORD_SAMPLE, 2, 0) + body)
    change = draw(st.sampled_from(["none", "cut", "count", "size"]))
    if change == "cut" and len(record) > 8:
        del record[draw(st.integers(8, len(record) - 1)):]
    elif change == "count" and counts:
        at = draw(st.sampled_from(counts))
        value = struct.unpack_from("<Q", record, at)[0]
        value = draw(st.sampled_from([value - 1, value + 1, value + 2, value + 8, 2**40,
                                      2**63])) % 2**64
        record[at:at + 8] = struct.pack("<Q", value)
    size = len(record) if change != "size" else draw(st.integers(8, len(record) + 8))
    attr = EventAttr(1, 0, sample_type, 0, 0, registers_mask, 64)
    return attr, bytes(record) + b"\xee" * 8, size


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), st.sampled_from([0, 1 << 40]))
def test_made_records_are_the_general_parse(drawn: tuple[EventAttr, bytes, int],
                                            base: int) -> None:
    attr, data, size = drawn
    parser = RecordParser([attr])
    buffer = memoryview(data)
    ours, general = _both(parser, attr, buffer, 2, 0, size, base)
    assert ours == general


def test_a_sample_past_the_buffer_is_the_general_parse() -> None:
    """A record whose size runs past the bytes there are (a caller's mistake, not the
    walker's: it checks sizes) fails as the general parse fails."""
    attr = EventAttr(1, 0, SAMPLE_IP | SAMPLE_CALLCHAIN, 0, 0, 0, 0)
    data = memoryview(RECORD_HEADER.pack(RECORD_SAMPLE, 2, 40) + struct.pack("<QQQ", 1, 5, 9))
    parser = RecordParser([attr])
    ours, general = _both(parser, attr, data, 2, 0, 40)
    assert ours == general and ours[0] != "sample"
