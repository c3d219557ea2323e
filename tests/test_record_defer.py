"""``sframe record --defer`` (root and BPF, as tests/test_record.py): samples taken in system
calls ask for their user stack and get it once per kernel entry, at the return to user
space; the file is perf's 6.19 deferred-callchain ABI, stitched by ``sframe script`` and,
when a perf >= 6.19 is installed beside the checkout, by ``perf script`` too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.support.oracles import need_perf, need_perf7
from tests.test_record_bpf import REASON, objects, settled

from pysframe.deferred.infrastructure import cookie_parts
from pysframe.sources.perf_data import open_perf_data
from pysframe.sources.perf_deferred import deferred_cookie
from pysframe.sources.perf_records import CallchainDeferred, Sample

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

#: Most of its time in long reads of /dev/zero (64 MiB each: several samples per system
#: call), some in user code, and an exit that unmaps the touched buffer.
KERNEL_HEAVY = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
static char buffer[1 << 26];
__attribute__((noinline)) void reader(int fd, int n) {
  for (int i = 0; i < n; i++) if (read(fd, buffer, sizeof buffer) < 0) exit(1); }
__attribute__((noinline)) void zeroes(int n) {
  int fd = open("/dev/zero", O_RDONLY); reader(fd, n); close(fd); }
__attribute__((noinline)) long user_work(long n) {
  volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
int main(int argc, char **argv) { int rounds = argc > 1 ? atoi(argv[1]) : 20;
  for (int r = 0; r < rounds; r++) { zeroes(2); user_work(2000000); }
  return 0; }
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the --defer recording of the program, sframe record's stderr)."""
    directory = tmp_path_factory.mktemp("defer")
    (directory / "heavy.c").write_text(KERNEL_HEAVY)
    program = directory / "heavy"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", str(program),
                    str(directory / "heavy.c")], check=True)
    before = objects()
    output = directory / "heavy.perf.data"
    run = subprocess.run([sys.executable, "-m", "pysframe", "record", "--defer", "-o",
                          str(output), "--", str(program), "20"], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, XDG_CACHE_HOME=str(directory / "cache")))
    assert run.returncode == 0, run.stderr
    assert settled(before) == before  # the tracepoint programs and maps are gone too
    return output, run.stderr


def records(path: Path) -> tuple[list[Sample], list[CallchainDeferred]]:
    samples, deferred = [], []
    with open_perf_data(str(path)) as data:
        for record in data.records():
            if isinstance(record, Sample):
                samples.append(record)
            elif isinstance(record, CallchainDeferred):
                deferred.append(record)
    return samples, deferred


def test_one_walk_per_kernel_entry_shared_by_its_samples(recording: tuple[Path, str]) -> None:
    path, stderr = recording
    samples, deferred = records(path)
    cookies = Counter(cookie for cookie in (deferred_cookie(sample.callchain)
                                            for sample in samples) if cookie is not None)
    walked = Counter(record.cookie for record in deferred)
    assert sum(cookies.values()) > 30  # samples in read() asked for their stacks
    assert max(walked.values()) == 1  # one walk per entry
    assert set(cookies) == set(walked)  # every request was answered, nothing else walked
    assert sum(cookies.values()) - len(walked) > len(walked) / 2  # shared cookies saved walks
    for cookie in walked:  # the kernel's rule: CPU + 1 low, an odd entry count high
        cpu, count = cookie_parts(cookie)
        assert 0 <= cpu < (os.cpu_count() or 1) and count & 1
    shared = f"({sum(cookies.values()) - len(walked):,} saved by shared cookies)"
    assert f"{sum(cookies.values()):,} samples taken in system calls" in stderr
    assert shared in stderr, stderr
    # A record follows the samples of its entry, from the same thread.
    first_sample = {}
    for sample in samples:
        cookie = deferred_cookie(sample.callchain)
        if cookie is not None:
            first_sample.setdefault(cookie, sample)
    for record in deferred:
        asked = first_sample[record.cookie]
        assert record.tid == asked.tid and record.time >= asked.time


def symbols(text: str) -> list[list[str]]:
    """Each sample's frame names, innermost first, without perf 7's inlined frames."""
    found = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()[1:]
        found.append([re.sub(r"\+0x[0-9a-f]+$", "", line.split()[1]) for line in lines
                      if line.strip() and "(inlined)" not in line])
    return found


def _no_sample_waits_in_vain(run: subprocess.CompletedProcess[str]) -> None:
    """No sample waits for a deferred callchain that never came, but one: a sample that
    lands inside the return program itself, after it took the entry's request and before
    the task is back in user space (its kernel chain is in the program's JIT code: seen
    once in a CI run), asks for a walk no program makes any more. Known, not fixed."""
    if run.returncode == 0:
        return
    found = re.search(r"(\d+) samples? without the deferred user callchain", run.stderr)
    assert run.returncode == 1 and found and int(found[1]) <= 1, run.stderr


def test_stitched_chains_reach_the_program_entry(recording: tuple[Path, str],
                                                 tmp_path: Path) -> None:
    path, _ = recording
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(path)],
                         capture_output=True, text=True, timeout=120)
    _no_sample_waits_in_vain(run)
    chains = symbols(run.stdout)
    reads = [chain for chain in chains if "reader" in chain]
    # (in reader but not in read_zero: taken in user mode, or in the kernel after the
    # read, e.g. in the return hook's own program)
    assert sum("read_zero" in chain for chain in reads) > 30
    assert all(chain[-1] == "_start" for chain in reads), [
        chain for chain in reads if chain[-1] != "_start"][:2]
    command = need_perf7()
    theirs = subprocess.run([*command, "script", "-i", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr[-300:]
    assert symbols(without_cookie_frames(theirs.stdout)) == chains


#: perf 7.2's line for a sample whose deferred callchain never came: the cookie printed as
#: a frame (``300000001 [unknown] ([unknown])``) after the kernel part. Not an address: we
#: print the kernel part alone, and one stderr line says the user part never came.
_COOKIE_FRAME = re.compile(r"(\n\t\s*ffffffff[0-9a-f]+ [^\n]*\(\[kernel\.kallsyms\]\))"
                           r"\n\t\s*[0-9a-f]+ \[unknown\] \(\[unknown\]\)(?=\n\n|\n?$)")


def without_cookie_frames(text: str) -> str:
    """perf's text without the cookie lines of samples whose user part never came."""
    return _COOKIE_FRAME.sub(r"\1", text)


def test_samples_whose_user_part_never_came_print_their_kernel_part(
        recording: tuple[Path, str], tmp_path: Path) -> None:
    """Three deferred records taken out of the file: their samples print their kernel
    frames, as perf 7 prints them (less its cookie line), every other sample as before,
    and one stderr line counts them; exit status 1."""
    from tests.support.perf_rewrite import records, with_data

    path, _ = recording
    raw = path.read_bytes()
    kept, dropped = bytearray(), 0
    for offset, kind, size in records(raw):
        if kind == 22 and dropped < 3:  # PERF_RECORD_CALLCHAIN_DEFERRED
            dropped += 1
            continue
        kept += raw[offset:offset + size]
    assert dropped == 3
    damaged = tmp_path / "dropped.data"
    damaged.write_bytes(with_data(raw, bytes(kept)))
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", str(damaged)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    waiting = re.search(r"(\d+) samples? without the deferred user callchain", run.stderr)
    assert waiting is not None and int(waiting[1]) >= 3
    theirs = subprocess.run([*need_perf7(), "script", "-i", str(damaged)],
                            capture_output=True, text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr[-300:]
    assert theirs.stdout != without_cookie_frames(theirs.stdout)  # perf printed cookies
    assert symbols(without_cookie_frames(theirs.stdout)) == symbols(run.stdout)


def user_part(chain: list[str]) -> tuple[str, ...]:
    """The user frames of a chain (innermost first), from the first frame of the program,
    without symbol versions (perf 7 prints ``__libc_start_main@@GLIBC_2.34``, 6.1 does not)."""
    first = next(index for index, name in enumerate(chain) if name in USER_FUNCTIONS)
    return tuple(re.sub(r"@@?GLIBC[\w.]*$", "", name) for name in chain[first:])


#: The program's own functions that call into the kernel (or are called on the way there).
USER_FUNCTIONS = {"read", "__GI___libc_read", "__libc_read", "reader", "zeroes", "main"}


def test_stitched_chains_are_those_perf_unwinds_itself(recording: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    """perf 7's stitching of our deferred records gives, for every sample in ``read()``, a
    user chain that perf's own DWARF unwinding (``perf record --call-graph dwarf`` of the
    same program, unwound by perf) gives for that program's samples in ``read()`` (a
    sample in the program's own frames: the same chain from that frame on; CI at
    5960b5a met one in ``reader`` that perf's recording had not sampled)."""
    perf, command = need_perf(), need_perf7()
    path, _ = recording
    program = path.parent / "heavy"
    dwarf = tmp_path / "dwarf.data"
    subprocess.run([perf, "record", "-q", "--no-bpf-event", "-e", "cpu-clock", "-F", "999", "--call-graph",
                    "dwarf", "-o", str(dwarf), "--", str(program), "20"], check=True,
                   capture_output=True, timeout=300)
    own = subprocess.run([perf, "script", "--no-inline", "-i", str(dwarf)], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    expected = {user_part(chain) for chain in symbols(own)
                if "reader" in chain and chain[-1] == "_start"}
    assert expected  # perf's own unwinding reached the program's entry from read()
    stitched = subprocess.run([*command, "script", "--no-inline", "-i", str(path)],
                              capture_output=True, text=True, timeout=120)
    assert stitched.returncode == 0, stitched.stderr[-300:]
    reads = [user_part(chain) for chain in symbols(stitched.stdout) if "reader" in chain]
    assert len(reads) > 30
    # A sample taken in the program's own code (reader itself: rare, and perf's separate
    # recording may have none there) is held to the same chain from its first frame on.
    tails = {chain[index:] for chain in expected for index in range(len(chain))}
    assert [chain for chain in reads if chain not in expected
            and not (chain[0] in ("reader", "zeroes", "main") and chain in tails)] == []
    assert any(chain in expected for chain in reads)  # the samples in read() themselves


def test_without_merging_the_records_are_printed_apart(recording: tuple[Path, str]) -> None:
    path, _ = recording
    run = subprocess.run([sys.executable, "-m", "pysframe", "script", "--no-merge-callchains",
                          str(path)], capture_output=True, text=True, timeout=120)
    _no_sample_waits_in_vain(run)
    _, deferred = records(path)
    assert run.stdout.count("DEFERRED CALLCHAIN") == len(deferred)


def test_report_folds_the_stitched_stacks(recording: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = recording
    folded = tmp_path / "heavy.folded"
    run = subprocess.run([sys.executable, "-m", "pysframe", "report", str(path), "--format",
                          "folded", "-o", str(folded)], capture_output=True, text=True,
                         timeout=120)
    _no_sample_waits_in_vain(run)
    weights = {line.rpartition(" ")[0]: int(line.rpartition(" ")[2])
               for line in folded.read_text().splitlines()}
    # user frames from the deferred walk, kernel frames from the sample, in one stack
    joined = [stack for stack in weights if ";reader;" in stack and "read_zero_[k]" in stack]
    assert joined and all(stack.startswith("heavy;_start;") for stack in joined)
