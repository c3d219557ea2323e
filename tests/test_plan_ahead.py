"""The topmost frames of the samples ahead are planned at once (a run's first sample, a
``script -j`` share's): their ips glanced at in the file
(:meth:`pysframe.sources.perf_data.PerfData.samples_ahead`) are what whole reads give,
the plans are those the samples would make one by one, and a table that faults where a
sample ahead would be is not dropped ahead of that sample's time."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.test_sample_parser import _outcome, records

from conftest import FIXTURES
from pysframe.format import ABI, FDE, FRE, BaseReg, Section, SFrameLookup, SFrameReader, encode
from pysframe.format.errors import CorruptError
from pysframe.session.perf import PerfUnwinder
from pysframe.sources.perf_data import Sample, open_perf_data
from pysframe.sources.perf_records import (
    RECORD_SAMPLE,
    SAMPLE_IP,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_TID,
    EventAttr,
    RecordParser,
)
from pysframe.unwind.address_space import AddressSpace, Mapping, Module
from pysframe.unwind.memory import StackMemory
from pysframe.unwind.unwinder import Registers, Unwinder

LUA = FIXTURES / "real" / "lua-2.46-x86_64"
_UNWOUND_FROM = SAMPLE_IP | SAMPLE_TID | SAMPLE_REGS_USER | SAMPLE_STACK_USER
_PLAN_AHEAD = Unwinder.plan_ahead


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
def test_a_glance_ahead_finds_what_a_whole_read_finds(drawn: tuple[EventAttr, bytes, int]
                                                      ) -> None:
    """One record of any shape, cut short or with counts off: a sample whose event records
    an IP, a TID, user registers and a stack copy is seen as its (pid, ip) where a whole
    read gives a sample; nothing where the header's size runs past the data, or the event
    records less."""
    attr, data, size = drawn
    record = bytearray(data)
    record[6:8] = struct.pack("<H", size)  # (the header's size: what a glance reads)
    buffer = memoryview(bytes(record))
    glance, stopped = RecordParser([attr]).ahead(buffer, 0, len(buffer), 1)
    whole = _outcome(lambda: RecordParser([attr]).parse(buffer, RECORD_SAMPLE, 2, 0, size, 0))
    assert stopped == (size if size <= len(buffer) else None)
    if attr.sample_type & _UNWOUND_FROM != _UNWOUND_FROM or size > len(buffer):
        assert glance == {}
    elif whole[0] == "sample":
        assert glance == {(whole[1].pid, whole[1].ip): None}
    else:  # malformed past its first fields: a glance may still see them (never more)
        assert len(glance) <= 1


def _file_samples() -> list[tuple[int, int, int]]:
    with open_perf_data(str(LUA / "perf.data")) as data:
        return [(record.offset, record.pid, record.ip) for record in data.records()
                if isinstance(record, Sample)]


@pytest.mark.parametrize(("start", "count", "span"),
                         [(0, 1, 1 << 30), (0, 3171, 1 << 30), (1000, 50, 1 << 30),
                          (3100, 10**6, 1 << 30), (0, 10**6, 1 << 20), (2000, 10**6, 40000)])
def test_the_samples_ahead_are_the_files_samples(start: int, count: int, span: int) -> None:
    """As many samples as asked for, as far as the span goes (each record whole within
    it), and where the next look starts: the record after the last one glanced at; none
    past the last record."""
    samples = _file_samples()
    assert len(samples) == 3171
    first = samples[start][0]
    within = [sample for sample in samples[start:start + count]
              if sample[0] < first + span - 8]  # (a record of ~8 KiB: whole or not at all)
    with open_perf_data(str(LUA / "perf.data")) as data:
        ahead, stopped = data.samples_ahead(first, count, span)
        end = data.data_offset + data.data_size
    glanced = [sample for sample in samples if first <= sample[0] < (stopped or end)]
    assert list(ahead) == list(dict.fromkeys((pid, ip) for _, pid, ip in glanced))
    assert len(within) - 1 <= len(glanced) <= len(within)
    # The next look: after the last record glanced at, none once the glance reached the end.
    assert (stopped is None) == (count > len(samples) and span > end)
    assert stopped is None or first < stopped <= end - 8


def _unwound(plan_ahead: bool, monkeypatch: pytest.MonkeyPatch,
             first: int = 0, last: int | None = None) -> tuple[list[Any], list[int]]:
    planned: list[int] = []
    ahead = _PLAN_AHEAD

    def counted(self: Unwinder, space: AddressSpace, pcs: Any) -> Any:
        made = ahead(self, space, pcs) if plan_ahead else []
        planned.append(len(made))
        return made

    monkeypatch.setattr(Unwinder, "plan_ahead", counted)
    with open_perf_data(str(LUA / "perf.data")) as data:
        unwinder = PerfUnwinder(data, [str(LUA)])
        samples = (unwinder.samples() if first == 0 and last is None
                   else unwinder.samples(first, last))
        layouts: dict[int, int] = {}  # (numbered in the process: as each run first met it)
        chains = [(u.sample.offset, tuple(u.unwind.pcs), [str(m) for m in u.unwind.methods],
                   u.unwind.stop.value, [None if m is None else (m.start, m.filename)
                                         for m in u.unwind.mappings],
                   layouts.setdefault(u.layout, len(layouts)))
                  for u in samples]
    return chains, planned


@pytest.mark.parametrize(("first", "last"), [(0, None), (0, 1761), (1761, None)])
def test_frames_planned_ahead_are_unwound_as_one_by_one(first: int, last: int | None,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The whole recording (a run's first sample plans its samples ahead), and the two
    shares of ``-j 2`` (each at its first sample)."""
    alone, none_planned = _unwound(False, monkeypatch, first, last)
    ahead, planned = _unwound(True, monkeypatch, first, last)
    assert ahead == alone
    assert none_planned and not any(none_planned) and sum(planned) > 300


_TEXT = 0x10000


def _faulting_space() -> tuple[AddressSpace, Module]:
    """Two functions of 0x40 bytes; a lookup in the second faults (a corrupt row)."""
    rows = [FRE(0, (8,), BaseReg.SP), FRE(0, (8,), BaseReg.SP)]
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[FDE(_TEXT + k * 0x40, 0x40, [row]) for k, row in enumerate(rows)])
    good = SFrameLookup(SFrameReader(encode(section), 0))

    class Faulting:
        def find_fre(self, pc: int) -> Any:
            if pc >= _TEXT + 0x40:
                raise CorruptError("a corrupt row", 0x30)
            return good.find_fre(pc)

    module = Module("/bin/t", None, 0, Faulting(), "test")  # type: ignore[arg-type]
    space = AddressSpace()
    space.add(Mapping(_TEXT, _TEXT + 0x80, 0, "/bin/t", None, module))
    return space, module


def test_a_table_that_faults_ahead_is_dropped_at_its_frames_time() -> None:
    space, module = _faulting_space()
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE)
    assert unwinder.plan_ahead(space, [_TEXT + 4, _TEXT + 0x44]) == [(_TEXT + 4,
                                                                      space.mappings[0])]
    assert module.guard.fault is None  # the fault is not met ahead of its frame
    stack = (0).to_bytes(8, "little")
    first = unwinder.unwind(Registers(_TEXT + 4, 0x7000, 0), StackMemory(0x7000, stack), space)
    assert first.methods[1:] == [] and module.guard.fault is None
    unwinder.unwind(Registers(_TEXT + 0x44, 0x7000, 0), StackMemory(0x7000, stack), space)
    assert module.guard.fault is not None  # dropped by its own frame, as ever


def test_lines_made_ahead_are_the_lines_the_samples_print() -> None:
    """With and without the lines made ahead, the same text, and perf's own (its
    `perf script --no-inline` of the recording)."""
    from tests.support.perf_text import held_to_perfs_text

    from pysframe.report.perf_script import perf_script_text

    texts: dict[bool, str] = {}
    told: list[int] = []
    for ahead in (False, True):
        with open_perf_data(str(LUA / "perf.data")) as data:
            unwinder = PerfUnwinder(data, [str(LUA)])

            def frames(unwinder: PerfUnwinder = unwinder) -> Any:
                found = unwinder.frames_ahead()
                told.append(len(found))
                return found

            texts[ahead] = "".join(perf_script_text(unwinder.samples(),
                                                    ahead=frames if ahead else None))
    assert texts[True] == texts[False]
    held_to_perfs_text(LUA / "perf.data", texts[True].encode())
    assert told[0] > 100 and sum(told) > 300  # (the first window, then the next ones)


def test_lines_ahead_keep_none_of_an_unknown_layout_and_replace_none() -> None:
    from pysframe.report.perf_script import KERNEL_LINES, lines_ahead
    from pysframe.symbolize.symbolizer import Symbolizer

    lines: dict[int, dict[int, str]] = {~3: {~0x2000: "made before"}}
    lines_ahead(lines, Symbolizer(), [(0, 0x1000, None), (3, 0x1000, None), (3, 0x2000, None)])
    assert KERNEL_LINES not in lines and set(lines) == {~3}  # (~0 is the kernel's lines)
    assert lines[~3] == {~0x2000: "made before",
                         ~0x1000: "\t            1000 [unknown] ([unknown])"}


def test_frames_ahead_nobody_asks_for_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader of the samples that never asks for the frames planned ahead (another
    report than perf-script text) keeps the latest ones only."""
    from pysframe.session import perf

    monkeypatch.setattr(perf, "PLAN_AHEAD", 50)
    monkeypatch.setattr(perf, "AHEAD_SPAN", 1 << 20)  # (~27 windows of ~120 samples)
    with open_perf_data(str(LUA / "perf.data")) as data:
        unwinder = PerfUnwinder(data, [str(LUA)])
        for _ in unwinder.samples():
            pass
        kept = unwinder.frames_ahead()
    assert 0 < len(kept) <= 50


def _share(first: int, last: int | None, waiting: int | None) -> tuple[list[Any], int, int]:
    """The chains of a ``-j 2`` share of the Lua recording as ``script -j`` makes them:
    from the first sample's state, after (``waiting``: for that many looks) the first
    share planned while the process waits before its fork; and how many frames were
    planned then, and handed to the share's text at its first sample."""
    from pysframe.session import perf as session_perf

    with open_perf_data(str(LUA / "perf.data")) as data:
        unwinder = PerfUnwinder(data, [str(LUA)])
        records = unwinder.from_first_sample()
        looks = [waiting or 0]

        def still() -> bool:
            looks[0] -= 1
            return looks[0] >= 0

        if waiting is not None:
            unwinder.plan_meanwhile(1761, still)
        before = len(unwinder._ahead)
        samples = unwinder.samples(first, last, records)
        chains = []
        handed = 0
        for unwound in samples:
            handed += len(unwinder.frames_ahead())
            chains.append((unwound.sample.offset, tuple(unwound.unwind.pcs),
                           [str(m) for m in unwound.unwind.methods], unwound.unwind.stop.value))
        assert session_perf.MEANWHILE * (waiting or 0) >= before
    return chains, before, handed


@pytest.mark.parametrize("waiting", [1, 3, 100])
def test_a_share_planned_while_waiting_unwinds_as_one_not_planned(waiting: int) -> None:
    """The first share's samples planned before the fork (for one look, a few, or all of
    them) unwind as they do without; their frames go to the first share's text, not to
    the second's, whose process plans its own."""
    first_alone, _, _ = _share(0, 1761, None)
    first, planned, handed_first = _share(0, 1761, waiting)
    assert first == first_alone and planned > 0 and handed_first >= planned
    second_alone, _, handed_alone = _share(1761, None, None)
    second, _, handed_second = _share(1761, None, waiting)
    assert second == second_alone
    # (the second share's frames are its own: those its samples plan, fewer where the
    # functions and plans of the first share's were made before the fork)
    assert 0 < handed_second <= handed_alone


def test_nothing_is_planned_when_nothing_waits() -> None:
    _, planned, _ = _share(0, 1761, 0)
    assert planned == 0
