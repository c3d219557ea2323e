"""`sframe script` against `perf script --no-inline` on recordings made here, of the kinds
people make: a C++ program (with symbols and stripped), sqlite3, python3, an
openssl | gzip | xz pipeline (all `--call-graph dwarf`), a frame-pointer (`-g`) recording
and a system-wide (`-a`) one. See tests/support/parity.py for what is compared."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.support.oracles import unavailable
from tests.support.parity import (
    Parity,
    compare,
    perf_can_record,
    perf_script,
    record,
    sframe_script,
)

SOURCE = Path(__file__).parent / "data" / "parity" / "cxx.cc"
DWARF = ("-F", "999", "--call-graph", "dwarf")

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 only")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("parity")
    reason = perf_can_record(directory)
    if reason is not None:
        unavailable(reason)
    return directory


@pytest.fixture(scope="module")
def cxx(workdir: Path) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    program = workdir / "cxx"
    subprocess.run(["g++", "-O2", "-g", "-o", str(program), str(SOURCE)], check=True,
                   timeout=300)
    return program


def run_parity(workdir: Path, name: str, command: list[str], *options: str) -> Parity:
    recording = record(workdir / f"{name}.data", command, *options)
    ours = sframe_script(recording, workdir / "cache")
    assert ours.returncode == 0, ours.stderr
    parity = compare(ours.stdout, perf_script(recording))
    print(parity.line(name))
    return parity


def check(parity: Parity, symbol_share: float = 0.995) -> None:
    assert parity.samples > 0
    assert parity.ours == parity.samples, parity.problems
    assert parity.headers_identical == parity.samples, parity.problems
    assert parity.shorter_or_different == 0, parity.problems
    assert parity.extended_by_non_return_site == 0
    assert parity.markers_matched == parity.markers
    assert parity.symbol_share >= symbol_share, parity.line("symbols")


def test_cxx_with_symbols(workdir: Path, cxx: Path) -> None:
    check(run_parity(workdir, "cxx", [str(cxx), "500"], *DWARF))


def test_cxx_stripped(workdir: Path, cxx: Path) -> None:
    stripped = workdir / "cxx-stripped"
    subprocess.run(["strip", "-o", str(stripped), str(cxx)], check=True)
    check(run_parity(workdir, "cxx-stripped", [str(stripped), "500"], *DWARF))


def test_sqlite3(workdir: Path) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("needs sqlite3")
    query = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 400000) "
             "SELECT count(*) FROM (SELECT x, printf('%08d', x * 7) AS s FROM c ORDER BY s);")
    check(run_parity(workdir, "sqlite3", ["sqlite3", ":memory:", query], *DWARF))


def test_python3(workdir: Path) -> None:
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("needs /usr/bin/python3")
    loop = "import json\nd = {}\nfor i in range(150000): d[str(i)] = json.dumps([i, i * 2])\n"
    check(run_parity(workdir, "python3", [python, "-c", loop], *DWARF))


def test_openssl_gzip_xz_pipeline(workdir: Path) -> None:
    if not all(shutil.which(tool) for tool in ("openssl", "gzip", "xz")):
        pytest.skip("needs openssl, gzip and xz")
    pipeline = "openssl rand 4000000 | gzip -1 | xz -1 > /dev/null"
    check(run_parity(workdir, "pipeline", ["sh", "-c", pipeline], *DWARF))


def test_frame_pointer_recording(workdir: Path, cxx: Path) -> None:
    """`-g`: the chains the kernel recorded, printed as perf prints them (to the byte)."""
    recording = record(workdir / "g.data", [str(cxx), "300"], "-F", "999", "-g")
    ours = sframe_script(recording, workdir / "cache")
    assert ours.returncode == 0, ours.stderr
    theirs = perf_script(recording)
    assert ours.stdout.count("cpu-clock:") == theirs.count("cpu-clock:") > 0
    check(compare(ours.stdout, theirs))


def test_system_wide_recording(workdir: Path) -> None:
    """`-a`: the [CPU] column, kernel threads and idle samples, every sample in perf's order."""
    recording = record(workdir / "a.data", ["sleep", "0.3"], "-a", "-F", "499", "-g")
    ours = sframe_script(recording, workdir / "cache")
    assert ours.returncode in (0, 1), ours.stderr
    parity = compare(ours.stdout, perf_script(recording))
    print(parity.line("system-wide"))
    assert re.search(r"^\S.* +\d+ \[\d{3}\] +\d+\.\d{6}: ", ours.stdout, re.MULTILINE)
    # Binaries of other processes may vanish before perf and we read them; the headers
    # (every sample, same order) and the chains do not depend on them.
    assert parity.ours == parity.samples and parity.headers_identical == parity.samples
    assert parity.shorter_or_different == 0, parity.problems
    assert parity.symbol_share >= 0.99, parity.line("system-wide")


VDSO_LOOP = """#include <time.h>
int main(void) { struct timespec t; long s = 0;
  for (long i = 0; i < 3000000; i++) { clock_gettime(CLOCK_MONOTONIC, &t); s += t.tv_nsec; }
  return s == 1; }
"""


def vdso_parity(workdir: Path, name: str, *options: str) -> str:
    """The clock_gettime() loop recorded by perf (with ``options``) and checked against
    perf's text; our text of it."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    source = workdir / f"{name}.c"
    source.write_text(VDSO_LOOP)
    program = workdir / name
    subprocess.run(["gcc", "-O2", "-o", str(program), str(source)], check=True, timeout=120)
    check(run_parity(workdir, name, [str(program)], *DWARF, *options))
    return sframe_script(workdir / f"{name}.data", workdir / "cache").stdout


def test_vdso_frames_are_named_as_perf_names_them(workdir: Path) -> None:
    """A program spending its time in clock_gettime(): the vDSO frames are named (from this
    process's vDSO, the recorded kernel's) and unwound into the caller, as perf does."""
    assert "__vdso_clock_gettime" in vdso_parity(workdir, "vdso")


def test_vdso_frames_of_a_recording_without_build_ids_are_named_as_perf_names_them(
        workdir: Path) -> None:
    """``perf record -B`` writes no build ids: perf takes its own vDSO for the recorded one.
    So do we when the recording names this kernel's release (it was made here), and the
    vDSO frames and the callers found through its CFI are perf's."""
    ours = vdso_parity(workdir, "vdso-b", "-B")
    assert ours.count("__vdso_clock_gettime") >= 10
    assert "[unknown] ([vdso])" not in ours


def test_the_frame_after_a_sample_in_sigreturn_is_an_exact_pc(tmp_path: Path) -> None:
    """The judge's rule for a sample taken during the trampoline's rt_sigreturn (its pc
    just after the ``syscall``): the next frame, read from the signal frame, is the exact
    pc the signal interrupted, not a return site. Anywhere else that frame must follow a
    call, as every caller does."""
    from tests.support.parity import SIGRETURN, _real_callers

    code = tmp_path / "code"
    # 0x100: the trampoline; 0x200: a syscall's end (no call before it), the interrupted pc
    data = bytearray(0x300)
    data[0x100:0x100 + len(SIGRETURN)] = SIGRETURN
    data[0x1F9:0x200] = bytes.fromhex("b818000000") + b"\x0f\x05"  # mov $24,%eax; syscall
    code.write_bytes(bytes(data))
    interrupted = (0x200, "osyield", str(code))
    in_syscall = (0x100 + len(SIGRETURN), "sigreturn", str(code))
    assert _real_callers([interrupted], in_syscall) is True
    assert _real_callers([interrupted], (0x100 + len(SIGRETURN) + 1, "sigreturn", str(code))) \
        is False  # not at the syscall's end: the frame must be a return site
