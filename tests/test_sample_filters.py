"""``script`` and ``report`` as perf takes them: the recording as FILE, ``-i FILE`` or
./perf.data; perf's filters ``--pid``, ``--tid``, ``--comms`` and ``--time`` (compared with
``perf script`` given the same options, on a recording of several processes and threads
made here); ``report -o -`` to standard output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, unavailable
from tests.support.parity import as_perf61, perf_can_record

from pysframe.session.filters import (
    NO_END,
    FilterError,
    SampleFilter,
    id_list,
    sample_filter,
    time_ranges,
)
from pysframe.sources.perf_records import Sample

S = 10**9


@pytest.mark.parametrize(("text", "ranges"), [
    ("12.5,13", ((12 * S + S // 2, 13 * S),)),
    (",13.000000001", ((0, 13 * S + 1),)),
    ("12.,", ((12 * S, NO_END),)),
    (".5,+7", ((S // 2, 7 * S),)),
    (",", ((0, NO_END),)),
    ("0,12 0.0", None),
    ("12,0", ((12 * S, NO_END),)),
    ("  1,2 3,4\t5,", ((S, 2 * S), (3 * S, 4 * S), (5 * S, NO_END))),
    ("1,2 3, 4", ((S, 2 * S), (3 * S, 4 * S))),
    ("5,5", ((5 * S, 5 * S),)),
])
def test_time_ranges_in_seconds(text: str, ranges: tuple[tuple[int, int], ...] | None) -> None:
    if ranges is None:
        with pytest.raises(FilterError):
            time_ranges(text, None)
    else:
        assert time_ranges(text, None) == ranges


@pytest.mark.parametrize("text", [
    "", "12", "abc", "1e3,", "-1,2", "1.1234567891,", "1.5.1,", "2,1", "1,2,3,4", "1 ,2",
    "1,2x", "1,2 2,3", "1,3 2,4", "1, 3,4", ",2 ,3", "1,2 3", "10%/11", "0%/1", "0%",
    "101%/1", "200%-300%", "30%,50%", "10%/1,0%-5%", "10%-", "-10%", "33.4%/3",
])
def test_what_perf_refuses_is_refused(text: str) -> None:
    with pytest.raises(FilterError, match=r"^--time"):
        time_ranges(text, (100 * S, 110 * S))


def test_percentages_of_the_recorded_span() -> None:
    first, last = 1000, 2000
    assert time_ranges("10%/2", (first, last)) == ((1100, 1199),)
    assert time_ranges("0%-10%,10%-20%", (first, last)) == ((1000, 1099), (1100, 1199))
    assert time_ranges("30%", (first, last)) == ((1000, 1299),)
    assert time_ranges("50%-100%", (first, last)) == ((1500, 2000),)  # the last one kept
    assert time_ranges("0%-0%", (first, last)) == ((1000, 1000),)
    assert time_ranges("40%-20%", (first, last)) == ((1400, 1200),)  # nothing, no error
    assert time_ranges("10% /2,", (first, last)) == ((1100, 1199),)
    assert time_ranges("5%-5.07%", (1, 1 + 10**4)) == ((501, 507),)  # nearest ns
    with pytest.raises(FilterError, match="SAMPLE_TIME"):
        time_ranges("10%/2", None)


def test_id_lists() -> None:
    assert id_list("12,,13, 14,", "--pid") == frozenset({12, 13, 14})
    assert id_list("", "--pid") == frozenset()
    for wrong in ("x", "12 ", "1_2", "0x10", "12x"):
        with pytest.raises(FilterError, match=r"^--tid"):
            id_list(wrong, "--tid")


def test_a_sample_passes_every_filter_given() -> None:
    def sample(pid: int, tid: int, time: int) -> Sample:
        return Sample(0, 2, pid=pid, tid=tid, time=time)

    assert sample_filter() is None
    keep = sample_filter(pid="1,2", comms="xz,,gzip", time="10,20")
    assert isinstance(keep, SampleFilter)
    assert keep.keeps(sample(1, 5, 15 * S), "xz")
    assert not keep.keeps(sample(3, 5, 15 * S), "xz")
    assert not keep.keeps(sample(1, 5, 15 * S), "xz ")
    assert not keep.keeps(sample(1, 5, 25 * S), "gzip")
    assert sample_filter(tid="") == SampleFilter(tids=frozenset())


# --- against perf ------------------------------------------------------------------------

#: Three processes at once: gzip, xz with two worker threads, and a shell loop.
WORK = ("gzip -c {big} > /dev/null & xz -T2 -1 -c {big} > /dev/null & "
        "(i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done) & wait")


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    perf = need_perf()
    if shutil.which("xz") is None or shutil.which("gzip") is None:
        unavailable("needs xz and gzip")
    directory = tmp_path_factory.mktemp("filters")
    reason = perf_can_record(directory)
    if reason is not None:
        unavailable(reason)
    path = directory / "perf.data"
    command = WORK.format(big=perf if os.path.getsize(perf) > 4 << 20 else sys.executable)
    subprocess.run([perf, "record", "-q", "-N", "--no-bpf-event", "-e", "cpu-clock", "-F",
                    "999", "--call-graph", "dwarf", "-o", str(path), "--", "sh", "-c",
                    command], check=True, capture_output=True, timeout=300)
    return path


def perf_text(path: Path, *options: str) -> str:
    return subprocess.run([need_perf(), "script", "--no-inline", "-i", str(path), *options],
                          capture_output=True, text=True, check=True, timeout=300).stdout


def sframe(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          timeout=600, cwd=cwd)


def headers(text: str) -> list[str]:
    """The sample lines."""
    return [line for line in text.splitlines() if line and not line.startswith("\t")]


def threads(path: Path) -> Counter[tuple[str, int, int]]:
    """Samples by (comm, pid, tid), from perf."""
    found = re.findall(r"^ *(\S+) +(\d+)/(\d+)", perf_text(path, "-F", "comm,pid,tid"), re.M)
    return Counter((comm, int(pid), int(tid)) for comm, pid, tid in found)


def option_sets(path: Path) -> list[list[str]]:
    seen = threads(path)
    xz = sorted({(pid, tid) for comm, pid, tid in seen if comm == "xz"})
    gzip = next(pid for comm, pid, _ in seen if comm == "gzip")
    worker = next(tid for pid, tid in xz if tid != pid)
    assert xz and worker  # a process with threads of its own
    xz_pid = xz[0][0]
    return [
        ["--pid", str(xz_pid)], ["--pid", f"{xz_pid},{gzip}"], ["--tid", f"{worker},{gzip}"],
        ["--comms", "xz,gzip"], ["-c", "sh"], ["--comms", "xz", "--pid", str(gzip)],
        ["--pid", ""], ["--pid", str(xz_pid), "--tid", str(worker)], ["--time", "10%/2"],
        ["--time", "0%-10%,30%-40%"], ["--time", "10%/1,10%/2"], ["--time", "30%"],
        ["--time", "90%-100%,0%-5%"], ["--pid", str(xz_pid), "--time", "50%-100%", "-c", "xz"],
    ]


def test_filters_keep_the_samples_perf_keeps(multi: Path) -> None:
    every = headers(perf_text(multi))
    assert len(every) > 200
    for options in option_sets(multi):
        ours = sframe("script", "-i", str(multi), *options)
        assert ours.returncode == 0, (options, ours.stderr)
        theirs = headers(perf_text(multi, *options))
        assert as_perf61(headers(ours.stdout.decode()), theirs) == theirs, options
        empty = options in (["--pid", ""], ["--comms", "xz", "--pid", options[-1]])
        assert bool(theirs) != empty, options
    # absolute times: around samples perf printed
    stamps = [float(re.search(r" (\d+\.\d+): ", line)[1]) for line in every]  # type: ignore[index]
    middle = stamps[len(stamps) // 2]
    for text in (f"{stamps[10]},{stamps[40]}", f",{middle}", f"{middle},",
                 f"{stamps[5]},{stamps[9]} {stamps[100]},{stamps[150]}"):
        ours = sframe("script", str(multi), "--time", text)
        assert ours.returncode == 0, ours.stderr
        theirs = headers(perf_text(multi, "--time", text))
        assert theirs and as_perf61(headers(ours.stdout.decode()), theirs) == theirs, text


def test_errors_are_one_line(multi: Path) -> None:
    for options in (["--time", "abc"], ["--pid", "x"], ["--time", "10%/11"]):
        ours = sframe("script", str(multi), *options)
        assert ours.returncode == 2 and not ours.stdout
        assert ours.stderr.decode().count("\n") == 1 and b"Traceback" not in ours.stderr
    both = sframe("script", str(multi), "-i", str(multi))
    assert both.returncode == 2 and b"once" in both.stderr


def test_perf_data_is_read_when_no_file_is_named(multi: Path) -> None:
    named = sframe("script", str(multi))
    assert named.returncode == 0 and named.stdout
    assert sframe("script", cwd=multi.parent).stdout == named.stdout
    assert sframe("script", "-i", str(multi)).stdout == named.stdout
    folded = multi.parent / "out.folded"
    assert sframe("report", "-o", str(folded), cwd=multi.parent).returncode == 0
    assert sframe("report", "-i", str(multi), "-o", "-").stdout == folded.read_bytes()


def test_report_filters_and_writes_to_standard_output(multi: Path) -> None:
    gzip = next(pid for comm, pid, _ in threads(multi) if comm == "gzip")
    out = sframe("report", str(multi), "--pid", str(gzip), "-o", "-")
    assert out.returncode == 0, out.stderr
    stacks = out.stdout.decode().splitlines()
    perfs = Counter({comm: count for (comm, pid, _), count in threads(multi).items()
                     if pid == gzip})  # "sh" before its exec
    ours: Counter[str] = Counter()
    for line in stacks:
        ours[line.partition(";")[0]] += int(line.rpartition(" ")[2])
    assert ours == perfs
    pprof = sframe("report", str(multi), "--format", "pprof", "-o", "-")
    assert pprof.returncode == 0 and pprof.stdout[:2] == b"\x1f\x8b"  # gzip
