"""The recorder's bounded state: records in a scratch file, exited processes forgotten.

``sframe record -a`` for hours must not grow with the recording's length: its records wait
in a scratch file (:mod:`pysframe.record.spool`), read back in time order at the end, and
the side band's history of each process (:class:`~pysframe.record.completion.ProcessMaps`)
forgets processes that exited once no sample waits for them, their children keeping a copy
of the layout they forked with.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from pysframe.record import spool as spool_module
from pysframe.record.completion import RECORD_FORK, ProcessMaps
from pysframe.record.perf_file import mmap2_record
from pysframe.record.spool import RecordSpool
from pysframe.sources.perf_records import RECORD_MMAP2


@pytest.mark.parametrize("buffer_bytes", [64, 1 << 20])
def test_records_come_back_in_time_order_with_their_rewrites(
        monkeypatch: pytest.MonkeyPatch, buffer_bytes: int) -> None:
    """Random records, some rewritten later (a chain finished from its stack copy), come
    back as a stable sort by time of the latest version of each, whatever the chunking."""
    monkeypatch.setattr(spool_module, "BUFFER_BYTES", buffer_bytes)
    generator = random.Random(7)
    for _ in range(50):
        spool = RecordSpool()
        expected: list[list[object]] = []
        for index in range(generator.randrange(0, 300)):
            stamp = generator.randrange(0, 40)
            data = bytes([index % 251]) * generator.randrange(1, 90)
            assert spool.append(stamp, data) == index
            expected.append([stamp, index, data])
            if generator.random() < 0.2:
                victim = generator.randrange(len(expected))
                again = bytes([255]) * generator.randrange(1, 200)
                spool.replace(victim, again)
                expected[victim][2] = again
        want = b"".join(item[2] for item in sorted(  # type: ignore[misc]
            expected, key=lambda item: (item[0], item[1])))
        assert spool.size == len(want)
        assert b"".join(spool.in_time_order()) == want
        spool.close()


def test_the_scratch_file_leaves_nothing_behind(tmp_path: object) -> None:
    directory = str(tmp_path)
    spool = RecordSpool(directory)
    spool.append(1, b"x" * 100)
    assert os.listdir(directory) == []  # unnamed: nothing to clean up after a crash
    assert b"".join(spool.in_time_order()) == b"x" * 100
    spool.close()


def _mmap(pid: int, start: int, path: str) -> bytes:
    return mmap2_record(pid, start, start + 0x1000, 0, "r-xp", 0, 1, path, 0)


def _fork(child: int, parent: int) -> bytes:
    return struct.pack("<IHHiiiiQ", RECORD_FORK, 0, 32, child, parent, child, parent, 0)


def test_exited_processes_are_forgotten_and_their_children_keep_their_layout() -> None:
    maps = ProcessMaps()
    maps.side_band(RECORD_MMAP2, 0, _mmap(10, 0x1000, "/bin/sh"), 5)
    maps.side_band(RECORD_MMAP2, 0, _mmap(10, 0x9000, "/lib/libc.so.6"), 6)
    maps.side_band(RECORD_FORK, 0, _fork(11, 10), 20)
    maps.side_band(RECORD_MMAP2, 0, _mmap(10, 0x20000, "/lib/late.so"), 30)  # after the fork
    before = maps.layout(11, 40)
    assert [entry[3] for entry in before] == ["/bin/sh", "/lib/libc.so.6"]

    maps.exited(10, now=100.0)
    assert maps.forget_exited(101.0, waiting=()) == 0  # within the grace period
    assert maps.forget_exited(103.0, waiting={10}) == 0  # a sample still waits for it
    assert maps.forget_exited(103.0, waiting=()) == 1
    assert 10 not in maps.events
    assert maps.layout(11, 40) == before  # the child kept what it forked with


def test_an_all_day_run_keeps_only_live_processes() -> None:
    """A shell starting 20,000 short commands, each exiting: the history stays the size
    of what is alive, not of what ever ran."""
    maps = ProcessMaps()
    maps.side_band(RECORD_MMAP2, 0, _mmap(1, 0x1000, "/bin/sh"), 1)
    now = 0.0
    for child in range(2, 20_002):
        stamp = child * 10
        maps.side_band(RECORD_FORK, 0, _fork(child, 1), stamp)
        maps.side_band(RECORD_MMAP2, 0, _mmap(child, 0x5000, f"/usr/bin/tool{child % 7}"),
                       stamp + 1)
        maps.exited(child, now)
        now += 0.01
        maps.forget_exited(now, waiting=())
    assert len(maps.events) < 300
    assert [entry[3] for entry in maps.layout(1, 10**9)] == ["/bin/sh"]


def test_events_read_out_of_order_are_sorted_before_a_layout_is_taken() -> None:
    maps = ProcessMaps()
    maps.side_band(RECORD_MMAP2, 0, _mmap(5, 0x3000, "/lib/b.so"), 30)
    maps.side_band(RECORD_MMAP2, 0, _mmap(5, 0x1000, "/lib/a.so"), 10)  # another CPU's
    maps.in_order()
    assert [entry[3] for entry in maps.layout(5, 20)] == ["/lib/a.so"]


def test_stack_copies_wait_on_disk_and_give_their_blocks_back(tmp_path: Path) -> None:
    """A waiting sample's stack copy is kept in a scratch file, read back whole by place
    while more are written, and its blocks are freed once its chain is finished (the
    file's size stays, its blocks do not)."""
    from pysframe.record.copies import CopyStore

    store = CopyStore(str(tmp_path))
    copies = [bytes([n]) * (16384 + n) for n in range(64)]
    places = [store.put(copy) for copy in copies]
    assert [store.get(at, len(copy)) for at, copy in zip(places, copies, strict=True)] == copies
    before = os.fstat(store._fd).st_blocks
    for at, copy in zip(places, copies, strict=True):
        store.drop(at, len(copy))
    after = os.fstat(store._fd).st_blocks
    assert after < before // 4, (before, after)
    assert os.listdir(tmp_path) == []  # unnamed: nothing left behind
    store.close()
