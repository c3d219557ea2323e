"""The walk over a recording's records split between two processes gives the serial walk's
arrays, whatever the candidate boundary and whatever the child does (pysframe.sources.
perf_scan). The serial walk is itself held to the record-by-record path by
tests/test_perf_arrays.py."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_records import RECORD_HEADER, RECORD_SAMPLE

np = pytest.importorskip("numpy")
from tests.support.sample_arrays import assert_same, record_joins  # noqa: E402

from pysframe.sources import perf_scan  # noqa: E402
from pysframe.sources.perf_arrays import SampleArrays, sample_arrays  # noqa: E402

RECORDINGS = [*sorted(FIXTURES.glob("real/lua-*/perf.data")),
              *sorted((REPO / "tests" / "data").glob("*.perf.data"))]
LUA = FIXTURES / "real" / "lua-2.46-x86_64" / "perf.data"


def arrays_of(path: Path, split: bool) -> SampleArrays | None:
    with open_perf_data(str(path)) as data:
        return sample_arrays(data, split=split)


def record_offsets(path: Path) -> list[int]:
    """Every record's offset, walking the headers."""
    with open_perf_data(str(path)) as data:
        offset, end, found = data.data_offset, data.data_offset + data.data_size, []
        while offset < end:
            found.append(offset)
            offset += RECORD_HEADER.unpack_from(data.buffer, offset)[2]
        return found


@pytest.fixture
def split_always(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every recording walked in two processes; the list gets whether each join happened."""
    return record_joins(monkeypatch)


@pytest.mark.skipif(not RECORDINGS, reason="no recordings here")
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_split_walk_gives_the_serial_walks_arrays(path: Path, split_always: list[bool]
                                                      ) -> None:
    serial = arrays_of(path, split=False)
    split = arrays_of(path, split=True)
    assert_same(split, serial)
    if serial is not None:  # (declined recordings: compressed, no stacks, stop early)
        assert split_always == [True], "the two halves were not joined"


def test_the_candidate_is_a_record_boundary_after_the_middle() -> None:
    offsets = record_offsets(LUA)
    with open_perf_data(str(LUA)) as data:
        end = data.data_offset + data.data_size
        middle = data.data_offset + data.data_size // 2 // 8 * 8
        found = perf_scan.candidate(data.buffer, middle, end)
    assert found in offsets
    assert found == min(offset for offset in offsets if offset >= middle)


def test_bytes_that_are_no_headers_give_no_candidate() -> None:
    buffer = bytes(4096)  # type 0 everywhere
    assert perf_scan.candidate(buffer, 0, len(buffer)) is None
    # A size that is no multiple of 8, or runs past the end
    buffer = b"".join(struct.pack("<IHH", RECORD_SAMPLE, 0, 12) for _ in range(512))
    assert perf_scan.candidate(buffer, 0, len(buffer)) is None


def test_the_search_for_a_candidate_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers chained 31 at a time from every offset, each chain broken by the next: the
    search gives up after PROBE_READS reads, not PROBE / 8 * CHAIN."""
    chain = perf_scan.CHAIN - 1
    record = struct.pack("<IHH", RECORD_SAMPLE, 0, 8)
    buffer = (record * chain + bytes(8)) * (perf_scan.PROBE // (8 * (chain + 1)) + 2)
    reads = 0
    unpack = perf_scan.RECORD_HEADER.unpack_from

    class Counting:
        def unpack_from(self, data: bytes, offset: int) -> tuple[int, int, int]:
            nonlocal reads
            reads += 1
            return unpack(data, offset)  # type: ignore[return-value]

    monkeypatch.setattr(perf_scan, "RECORD_HEADER", Counting())
    assert perf_scan.candidate(buffer, 0, len(buffer)) is None
    assert reads <= perf_scan.PROBE_READS


def test_a_candidate_that_is_no_boundary_is_walked_alone(
        monkeypatch: pytest.MonkeyPatch, split_always: list[bool]) -> None:
    """The parent's walk passes over the candidate (8 bytes into a record): the child's
    half is dropped, the child ended and waited for, and the parent walks on alone."""
    offsets = record_offsets(LUA)
    inside = offsets[len(offsets) // 2] + 8
    monkeypatch.setattr(perf_scan, "candidate", lambda buffer, start, end: inside)
    ended: list[int] = []
    end = perf_scan._end
    monkeypatch.setattr(perf_scan, "_end", lambda pid, memory, ready: (
        ended.append(pid), end(pid, memory, ready)))
    assert_same(arrays_of(LUA, split=True), arrays_of(LUA, split=False))
    assert split_always == [] and len(ended) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(ended[0], os.WNOHANG)  # reaped


@pytest.mark.parametrize("status", [0, 3])
def test_a_child_that_fails_leaves_its_half_to_the_parent(
        monkeypatch: pytest.MonkeyPatch, split_always: list[bool], status: int) -> None:
    """A child that ends without a result (status 0, nothing written) or fails."""
    monkeypatch.setattr(perf_scan, "_child",
                        lambda data, blocks, boundary, memory, written: os._exit(status))
    assert_same(arrays_of(LUA, split=True), arrays_of(LUA, split=False))
    assert split_always == [False]


@pytest.mark.parametrize("where", [0.25, 0.75])
def test_a_damaged_header_in_either_half_declines_as_the_serial_walk_does(
        tmp_path: Path, split_always: list[bool], where: float) -> None:
    """A record's size made 12 (no multiple of 8) in the parent's half or in the
    child's: both walks decline the recording (the record path reads it and says so)."""
    copy = tmp_path / "perf.data"
    shutil.copyfile(LUA, copy)
    offsets = record_offsets(LUA)
    damaged = offsets[int(len(offsets) * where)]
    with open(copy, "r+b") as file:
        file.seek(damaged + 6)
        file.write(struct.pack("<H", 12))
    assert arrays_of(copy, split=False) is None
    assert arrays_of(copy, split=True) is None


def test_one_usable_cpu_walks_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned to one CPU (taskset), however many the machine has: no child."""
    monkeypatch.setattr(perf_scan, "SPLIT_FROM", 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    forks: list[int] = []
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or os.getpid())
    assert_same(arrays_of(LUA, split=True), arrays_of(LUA, split=False))
    assert forks == []


def test_a_child_that_says_ready_over_a_damaged_result_leaves_its_half_to_the_parent(
        monkeypatch: pytest.MonkeyPatch, split_always: list[bool]) -> None:
    """The parent reads the result when the child says it is written (not once the child
    has ended): bytes that do not unpickle are no result; the child is reaped anyway."""

    def child(data: object, blocks: object, boundary: int, memory: int, written: int) -> None:
        os.write(memory, b"not a pickle")
        os.write(written, b"\1")
        os._exit(0)

    monkeypatch.setattr(perf_scan, "_child", child)
    assert_same(arrays_of(LUA, split=True), arrays_of(LUA, split=False))
    assert split_always == [False]
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)


def test_the_child_of_a_joined_walk_is_reaped(split_always: list[bool]) -> None:
    assert_same(arrays_of(LUA, split=True), arrays_of(LUA, split=False))
    assert split_always == [True]
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)
