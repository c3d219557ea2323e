"""The one perf.data writer (``pysframe.report.perf_data_out``): what it builds, our reader
reads back field for field and perf 7 reads; and its two halves agree (a file it rewrites
is the file it would have built with the new data). perf also reads what both commands
write, in test_record.py and test_perf_deferred.py."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest
from tests.support.oracles import need_perf7

from pysframe.report import perf_data_out as out
from pysframe.sources.perf_data import Comm, Sample, open_perf_data

SAMPLE_TYPE = (out.SAMPLE_IP | out.SAMPLE_TID | out.SAMPLE_TIME | out.SAMPLE_CALLCHAIN
               | out.SAMPLE_CPU | out.SAMPLE_PERIOD)
FLAGS = (1 << 10) | (1 << 18)  # freq, sample_id_all


def build(data: bytes, *, attrs: int = 1, build_ids: bytes = b"") -> bytes:
    attr = out.event_attr(1, 0, 99, SAMPLE_TYPE, FLAGS)
    return out.perf_data([attr] * attrs, data, {out.FEATURE_BUILD_ID: build_ids})


def records() -> bytes:
    trailer = out.sample_id_trailer(SAMPLE_TYPE, 10, 11, 500, 2)
    return b"".join([
        out.comm(10, 11, "worker", trailer),
        out.mmap2(out.MISC_USER, 10, 10, 0x400000, 0x1000, 0, major=8, minor=1, inode=77,
                  prot=5, flags=2, filename="/usr/bin/worker", trailer=trailer),
        out.sample(SAMPLE_TYPE, out.MISC_USER, ip=0x400010, pid=10, tid=11, time=600, cpu=2,
                   period=1000, chain=[out.PERF_CONTEXT_USER, 0x400010, 0x400020]),
    ])


def test_what_it_builds_reads_back(tmp_path: Path) -> None:
    entry = out.build_id_entry(bytes(range(20)), "/usr/bin/worker", kernel=False)
    path = tmp_path / "built.data"
    path.write_bytes(build(records(), attrs=2, build_ids=entry))
    with open_perf_data(str(path)) as data:
        assert [attr.sample_type for attr in data.attrs] == [SAMPLE_TYPE, SAMPLE_TYPE]
        assert [(b.build_id, b.filename, b.kernel) for b in data.build_ids()] == [
            (bytes(range(20)), "/usr/bin/worker", False)]
        found = list(data.records())
        assert not data.skipped
    comms = [record for record in found if isinstance(record, Comm)]
    samples = [record for record in found if isinstance(record, Sample)]
    assert [(c.pid, c.tid, c.comm) for c in comms] == [(10, 11, "worker")]
    assert [(s.pid, s.tid, s.time, s.ip) for s in samples] == [(10, 11, 600, 0x400010)]


def test_perf_7_reads_what_it_builds(tmp_path: Path) -> None:
    command = need_perf7()
    path = tmp_path / "built.data"
    path.write_bytes(build(records()))
    run = subprocess.run([*command, "script", "-f", "-i", str(path), "-F", "comm,tid,ip"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["worker", "11", "400010", "400020"]


@pytest.mark.parametrize("build_ids", [b"", out.build_id_entry(b"\x01" * 20, "/x", False)])
def test_a_rewritten_file_is_the_file_it_would_build(build_ids: bytes) -> None:
    """rewritten() moves the feature table after a new data section of another size and
    keeps every attribute (identity patch): the same bytes perf_data() makes."""
    original = build(records(), attrs=2, build_ids=build_ids)
    shorter = records()[:-8 * 4]  # any bytes: the data section is opaque to both
    assert out.rewritten(original, shorter, lambda attr, index: None) == build(
        shorter, attrs=2, build_ids=build_ids)


def test_records_are_padded_and_bounded() -> None:
    assert out.record(3, 0, b"abc") == struct.pack("<IHH", 3, 0, 16) + b"abc" + bytes(5)
    with pytest.raises(out.WriteError, match="does not fit"):
        out.record(9, 0, bytes(0x10000))
    with pytest.raises(out.WriteError, match="only IP, TID"):
        out.sample(SAMPLE_TYPE | out.SAMPLE_ADDR, 0, ip=0, pid=0, tid=0, time=0, cpu=0,
                   period=0, chain=[])


def test_kernel_text_is_found_in_kallsyms(tmp_path: Path) -> None:
    """``_text`` and ``_etext`` of the running kernel's symbol list (the recorder's kernel
    mapping), not their look-alikes; a list whose addresses are hidden gives none."""
    from pysframe.record.perf_file import kernel_text

    listing = tmp_path / "kallsyms"
    listing.write_text("ffffffff81000000 T srso_alias_untrain_ret\n"
                       "ffffffff81000000 T _stext\nffffffff81000000 T _text\n"
                       "ffffffff81000100 t __text\n"
                       "ffffffff8220bb08 T _etext\n"
                       "ffffffffc0000000 t _text\t[module]\n")
    assert kernel_text(str(listing)) == (0xFFFFFFFF81000000, 0xFFFFFFFF8220BB08)
    listing.write_text("0000000000000000 T _text\n0000000000000000 T _etext\n")
    assert kernel_text(str(listing)) is None
    assert kernel_text(str(tmp_path / "missing")) is None
    if Path("/proc/kallsyms").exists():
        found = kernel_text()
        assert found is None or found[1] is None or found[0] < found[1]
