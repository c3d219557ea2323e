"""The perf.data reader, against the Lua recording and perf's own `perf script` output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from pysframe.sources.perf_data import (
    Comm,
    Mmap,
    PerfDataError,
    Sample,
    in_time_order,
    open_perf_data,
)

LUA = FIXTURES / "real" / "lua-2.46-x86_64"
PERF_DATA = LUA / "perf.data"
needs_recording = pytest.mark.skipif(not PERF_DATA.exists(), reason="no Lua recording")


def perf_script_headers() -> list[tuple[int, str, int]]:
    """(tid, time text, period) of every sample line of perf's own output."""
    pattern = re.compile(r"^(\S+)\s+(\d+)\s+(\d+\.\d{6}):\s+(\d+) cpu-clock: $")
    out = []
    with open(LUA / "perf-script.no-inline.txt") as handle:
        for line in handle:
            match = pattern.match(line.rstrip("\n"))
            if match:
                out.append((int(match[2]), match[3], int(match[4])))
    return out


@needs_recording
def test_samples_in_perf_script_order_with_the_same_headers() -> None:
    with open_perf_data(str(PERF_DATA)) as data:
        samples = [r for r in in_time_order(data.records()) if isinstance(r, Sample)]
        assert data.skipped == []
        ours = [(s.tid, f"{s.time // 10**9}.{s.time % 10**9 // 1000:06d}", s.period)
                for s in samples]
        assert ours == perf_script_headers()
        first = samples[0]
        assert first.cpumode == 2 and len(first.regs) == 20 and first.stack is not None
        assert len(first.stack) == first.stack_dyn_size <= 8192
        assert first.attr is not None and first.attr.sample_regs_user == 0xFF0FFF


@needs_recording
def test_header_features_and_side_band_records() -> None:
    with open_perf_data(str(PERF_DATA)) as data:
        assert data.arch == "x86_64"
        assert data.cmdline[-2:] == ["./lua", "bench.lua"]
        ids = {entry.filename: entry.build_id.hex() for entry in data.build_ids()}
        assert ids["/srv/fixtures/lua-2.46-x86_64/lua"] == "56dff16ba45086a226836ebe3fe068b05a1676a5"
        assert ids["/usr/lib/x86_64-linux-gnu/libc.so.6"] == \
            "93ac61ec5a8eb1396f9fbd350e3169a558528a40"
        records = list(data.records())
        maps = [r for r in records if isinstance(r, Mmap) and r.filename.endswith("/lua")]
        assert (maps and maps[0].executable) or any(m.executable for m in maps)
        assert any(isinstance(r, Comm) and r.comm == "lua" for r in records)


@needs_recording
def test_truncated_recording_reports_what_was_skipped(tmp_path: Path) -> None:
    cut = tmp_path / "cut.data"
    raw = PERF_DATA.read_bytes()
    cut.write_bytes(raw[:len(raw) // 2])
    with open_perf_data(str(cut)) as data:
        samples = [r for r in data.records() if isinstance(r, Sample)]
        assert 1000 < len(samples) < 3171
        assert data.skipped and all(isinstance(offset, int) for offset, _ in data.skipped)


def test_not_perf_data(tmp_path: Path) -> None:
    path = tmp_path / "x.data"
    path.write_bytes(b"\x7fELF" + bytes(200))
    with pytest.raises(PerfDataError, match=r"not a perf\.data file"):
        open_perf_data(str(path))
    with pytest.raises(PerfDataError):
        open_perf_data(str(tmp_path / "absent"))


@needs_recording
def test_mutated_recordings_never_raise_past_the_reader(tmp_path: Path) -> None:
    """Flipped bytes in the header, attributes and records of a (cut) recording: either a
    PerfDataError on open, or records with what was skipped listed; unwinding never crashes."""
    import random

    from pysframe.session.perf import PerfUnwinder

    original = PERF_DATA.read_bytes()[:400_000]
    rng = random.Random(5)
    for case in range(60):
        data = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            at = rng.choice((rng.randrange(0, 300), rng.randrange(len(data))))
            data[at] = rng.randrange(256)
        path = tmp_path / f"m{case}.data"
        path.write_bytes(bytes(data))
        try:
            recording = open_perf_data(str(path))
        except PerfDataError:
            continue
        with recording:
            try:
                for _ in PerfUnwinder(recording, [str(LUA)]).samples():
                    pass
            except ValueError as error:  # unsupported architecture named by a mutated header
                assert "architecture" in str(error)


DATA = Path(__file__).resolve().parent / "data"


def test_compressed_recording() -> None:
    """`perf record -z` writes one zstd stream across PERF_RECORD_COMPRESSED records
    (tests/data: a shell loop recorded on this project's machine, with perf's own output)."""
    path = DATA / "sh-loop.zstd.perf.data"
    expected = (DATA / "sh-loop.zstd.perf-script.txt").read_text()
    headers = [line for line in expected.splitlines() if line.endswith("cpu-clock: ")]
    with open_perf_data(str(path)) as data:
        for _ in range(2):  # a second pass decodes the stream from its start again
            samples = [r for r in in_time_order(data.records()) if isinstance(r, Sample)]
            assert data.skipped == []
            assert len(samples) == len(headers) == 34
        ours = [(s.tid, f"{s.time // 10**9}.{s.time % 10**9 // 1000:06d}", s.period)
                for s in samples]
        pattern = re.compile(r"^\S+\s+(\d+)\s+(\d+\.\d{6}):\s+(\d+) cpu-clock: $")
        theirs = [(int(m[1]), m[2], int(m[3])) for m in map(pattern.match, headers) if m]
        assert ours == theirs


def test_compressed_recording_script_text_when_binaries_match(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from pysframe.elf import ElfError, ElfImage
    from pysframe.report.perf_script import perf_script_text
    from pysframe.session.perf import PerfUnwinder

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = DATA / "sh-loop.zstd.perf.data"
    with open_perf_data(str(path)) as data:
        for entry in data.build_ids():
            if entry.kernel or entry.filename.startswith("["):
                continue
            try:
                same = ElfImage(entry.filename).build_id() == entry.build_id
            except ElfError:
                same = False
            if not same:
                pytest.skip(f"{entry.filename} is not the recorded binary here")
        ours = "".join(perf_script_text(PerfUnwinder(data).samples()))
    theirs = (DATA / "sh-loop.zstd.perf-script.txt").read_text()

    def user_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if "[kernel.kallsyms]" not in line]

    assert user_lines(ours) == user_lines(theirs)
