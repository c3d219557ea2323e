"""Hostile perf.data recordings built from real ones (issue 11): zstd bombs in compressed
records, records split across compressed records, recordings without FINISHED_ROUND
records, recordings cut inside their feature section."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard
from tests.support.perf_rewrite import (
    comp_mmap_len,
    compressed_records,
    feature_table,
    inflate,
    inflated,
    leading_records,
    pieces,
    repeated,
    with_data,
    without_rounds,
    zstd_bomb,
)

from conftest import FIXTURES
from pysframe.sources.perf_data import Comm, Sample, in_time_order, open_perf_data

DATA = Path(__file__).resolve().parent / "data"
SH_LOOP = DATA / "sh-loop.zstd.perf.data"
LUA = FIXTURES / "real" / "lua-2.46-x86_64"
needs_lua = pytest.mark.skipif(not (LUA / "perf.data").exists(), reason="no Lua recording")


#: Runs `sframe ARGS` and writes its peak RSS (VmHWM, KiB) to a file at exit: the child's
#: own high-water mark. (ru_maxrss of a child forked from this big test process would
#: start at this process's size.)
PEAK_WRAPPER = """
import atexit, sys
report = sys.argv.pop(1)
def peak():
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
sys.argv[0] = "sframe"
from pysframe.cli.main import main
main()
"""


def script(path: Path, cache: Path, *extra: str, timeout: float = 120,
           engine: str = "") -> tuple[int, str, str, int]:
    """(exit status, stdout, stderr, peak RSS in KiB) of `sframe script PATH EXTRA...`
    (``engine``: PYSFRAME_ENGINE, default: chosen by size); ``timeout`` is a hang
    detector only."""
    out, err, peak = cache / "stdout", cache / "stderr", cache / "peak"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYSFRAME_ENGINE": engine}
    argv = [sys.executable, "-c", PEAK_WRAPPER, str(peak), "script", str(path), *extra]
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        try:
            status = subprocess.run(argv, stdout=stdout, stderr=stderr, env=env,
                                    timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            pytest.fail(f"sframe script {path} still running after {timeout} s")
    return status, out.read_text(), err.read_text(), int(peak.read_text())


def sh_loop_stream() -> tuple[bytes, bytes]:
    """(the uncompressed records of the sh-loop recording, its raw bytes)."""
    raw = SH_LOOP.read_bytes()
    return inflated(raw, inflate), raw


def sample_keys(path: Path) -> list[tuple[int, int, int]]:
    with open_perf_data(str(path)) as data:
        return [(r.tid, r.time, r.period) for r in in_time_order(data.records())
                if isinstance(r, Sample)]


# --- decompression ------------------------------------------------------------------------


def test_zstd_bomb_is_skipped_with_bounded_output(tmp_path: Path) -> None:
    """Two compressed records of a few KB that inflate to 128 MiB of tiny records each,
    between good compressed data: each is skipped at its limit (the recording's ring-buffer
    size), the rest of the file is still read, and the decompressor stops early."""
    from pysframe.sources.perf_inflate import SLICE

    stream, raw = sh_loop_stream()
    limit = comp_mmap_len(raw)
    bomb, bomb_at = zstd_bomb(raw, 128 * 2**20)
    assert len(bomb) < len(raw) + 40_000
    path = tmp_path / "bomb.data"
    path.write_bytes(bomb)

    started = time.monotonic()
    with open_perf_data(str(path)) as recording:
        found = list(recording.records())
        samples = [r for r in found if isinstance(r, Sample)]
        assert len(samples) == 68  # 34 before the bomb, 34 in the new frame after it
        assert sum(isinstance(r, Comm) for r in found) > 2
        skipped = dict(recording.skipped)
        assert bomb_at[0] in skipped and "limit" in skipped[bomb_at[0]]
        assert bomb_at[1] in skipped
        # what the decompressor produced: the good data twice, and for the bomb at most
        # the limit and one step (the stream is lost after it, up to the new frame)
        assert recording.inflated <= 2 * len(stream) + limit + SLICE * 2**15
    assert time.monotonic() - started < 60  # a hang detector, not a speed bar

    status, _, err, rss = script(path, tmp_path)
    assert status == 1
    assert f"skipped at offset {bomb_at[0]:#x}" in err
    assert rss < 200 * 1024, rss  # before: the 256 MiB of output held whole


def test_records_split_across_compressed_records(tmp_path: Path) -> None:
    """perf carries a record cut at the end of one compressed record's output over to the
    next one's; so do we (the same 34 samples as the original)."""
    stream, raw = sh_loop_stream()
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    payloads = [compressor.compress(stream[at:at + 4099])
                + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                for at in range(0, len(stream), 4099)]
    path = tmp_path / "split.data"
    path.write_bytes(with_data(raw, leading_records(raw) + compressed_records(payloads)))
    with open_perf_data(str(path)) as data:
        list(data.records())
        assert data.skipped == []
    assert sample_keys(path) == sample_keys(SH_LOOP)


def test_compressed2_records(tmp_path: Path) -> None:
    """PERF_RECORD_COMPRESSED2 (type 83: a u64 data size, then the payload padded to 8)."""
    stream, raw = sh_loop_stream()
    payload = zstandard.ZstdCompressor(level=3).compressobj()
    chunks = pieces(payload.compress(stream) + payload.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    out = bytearray(leading_records(raw))
    for chunk in chunks:
        size = (16 + len(chunk) + 7) & ~7
        out += struct.pack("<IHHQ", 83, 0, size, len(chunk)) + chunk + bytes(size - 16
                                                                           - len(chunk))
    path = tmp_path / "c2.data"
    path.write_bytes(with_data(raw, bytes(out)))
    assert sample_keys(path) == sample_keys(SH_LOOP)


# --- time order without FINISHED_ROUND ------------------------------------------------------


def unwound(path: Path) -> list[tuple[int, int, tuple[int, ...]]]:
    from pysframe.session.perf import PerfUnwinder

    with open_perf_data(str(path)) as data:
        out = [(u.sample.tid, u.sample.time, tuple(f.pc for f in u.unwind.frames))
               for u in PerfUnwinder(data, [str(LUA)]).samples()]
        assert data.skipped == []
    return out


@needs_lua
def test_without_rounds_same_samples_in_the_same_order(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every FINISHED_ROUND turned into a no-op record: the same unwound samples in the same
    order; also when the reader gives up holding records and sorts an index instead (small
    limits), with and without rounds."""
    import pysframe.sources.perf_order as order

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    raw = (LUA / "perf.data").read_bytes()
    bare = tmp_path / "bare.data"
    bare.write_bytes(without_rounds(raw))
    expected = unwound(LUA / "perf.data")
    assert len(expected) == 3171
    assert unwound(bare) == expected
    monkeypatch.setattr(order, "PENDING_BYTES", 200_000)
    monkeypatch.setattr(order, "PENDING_RECORDS", 300)
    assert unwound(bare) == expected
    assert unwound(LUA / "perf.data") == expected  # switches after some rounds


@needs_lua
@pytest.mark.parametrize("engine", ["scalar", "vector"])
def test_without_rounds_memory_does_not_grow_with_the_file(tmp_path: Path, engine: str) -> None:
    """Peak RSS of `sframe script` on 1 and on 4 copies of the recording, without
    FINISHED_ROUND records, with each engine. Record path: 58 and 89 MiB (the index, numpy,
    and what streaming held before it gave up); before, 58 and 143 MiB (every sample held,
    and every page of the file back in memory when they were unwound at the end: 28 MiB
    more per copy). Batch pipeline: its order is computed on arrays, and each chunk's
    mapped pages are dropped after it (one copy is one chunk; four are four)."""
    raw = without_rounds((LUA / "perf.data").read_bytes())
    peaks = []
    for copies in (1, 4):
        path = tmp_path / f"x{copies}.data"
        path.write_bytes(repeated(raw, copies))
        status, out, err, rss = script(path, tmp_path, "--binaries", str(LUA), "-j", "1",
                                       engine=engine)
        assert status == 0, err
        assert out.count("\n\n") == 3171 * copies
        peaks.append(rss)
        path.unlink()
    assert peaks[1] < peaks[0] + 50 * 1024, peaks


# --- a recording cut inside its feature section -------------------------------------------


@needs_lua
@pytest.mark.parametrize("where", ["table", "body"])
def test_cut_inside_the_feature_section(tmp_path: Path, where: str) -> None:
    """Cut inside the feature table, or inside the last feature's body: one line naming
    the offset, exit 1 (before: nothing said, exit 0)."""
    raw = (LUA / "perf.data").read_bytes()
    table = feature_table(raw)
    if where == "table":
        cut, named = table + 16 * 5 + 3, table + 16 * 5
    else:
        last = max(struct.unpack_from("<QQ", raw, table + 16 * index)
                   for index in range(20))
        cut, named = last[0] + last[1] // 2, last[0]
    path = tmp_path / "cut.data"
    path.write_bytes(raw[:cut])
    with open_perf_data(str(path)) as data:
        assert data.cmdline[-2:] == ["./lua", "bench.lua"] or where == "table"
        list(data.records())
        assert [offset for offset, _ in data.skipped] == [named], data.skipped
    status, out, err, _ = script(path, tmp_path, "--binaries", str(LUA))
    assert status == 1
    lines = err.splitlines()
    assert len(lines) == 1 and f"skipped at offset {named:#x}" in lines[0], err
    assert out.count("\n\n") == 3171


def test_skipped_parts_are_listed_up_to_a_cap(tmp_path: Path) -> None:
    """A file of 5000 malformed records lists 1000 of them and one line for the others
    (before: 5000 entries; one per record of a file of any size)."""
    from pysframe.sources.perf_data import MAX_SKIPPED

    raw = SH_LOOP.read_bytes()
    bad = struct.pack("<IHH", 9, 0, 16) + bytes(8)  # a sample too short for its fields
    path = tmp_path / "bad.data"
    path.write_bytes(with_data(raw, leading_records(raw) + bad * 5000))
    with open_perf_data(str(path)) as data:
        for _ in range(2):
            assert not any(isinstance(r, Sample) for r in data.records())
        assert len(data.skipped) == MAX_SKIPPED + 1
        assert "not listed" in data.skipped[-1][1]
