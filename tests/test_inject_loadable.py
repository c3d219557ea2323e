"""``sframe inject`` on linked files (ET_EXEC, ET_DYN): the section is loaded and named by
``PT_GNU_SFRAME``, the program still runs, and a started process holds the section at that
address. The judges: GNU readelf and objdump 2.47.50, ld.so (``--verify``, ``--list``),
the program's own ``--version``, ``/proc/PID/mem`` and ``/proc/PID/auxv`` of the started
process, the kernel's registration policy (``validate --kernel``) and, for
``sframe defer``, a ``--call-graph dwarf`` recording by perf."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.loaded import library_memory, program_memory
from tests.support.oracles import need_binutils, need_perf

from pysframe.elf import ElfImage
from pysframe.elf.headers import PT_GNU_SFRAME, PT_LOAD
from pysframe.format.validation import ERROR, validate
from pysframe.generate.inject import inject

SFRAME = [sys.executable, "-m", "pysframe"]
LOADER = "/lib64/ld-linux-x86-64.so.2"
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
PROGRAMS = ["xz", "gzip", "ls", "bash"]
LIBRARIES = ["libz.so.1", "libc.so.6"]
HELLO = r"""
#include <stdio.h>
#include <string.h>
static char big[1 << 20];
__thread int tls = 5;
int main(int argc, char **argv) {
    memset(big, argc, 16);
    if (argc > 1 && !strcmp(argv[1], "--version")) printf("hello %d %d\n", tls, big[3]);
    return 0;
}
"""
WORK = r"""
#include <stdlib.h>
__attribute__((noinline)) long leaf(long n) { long s = 0; for (long i = 0; i < n; i++) s += i ^ (s >> 3); return s; }
__attribute__((noinline)) long mid(long n) { return leaf(n) + (n & 1); }
__attribute__((noinline)) long top(long n) { return mid(n) * 3; }
int main(int argc, char **argv) {
    long total = 0, n = argc > 1 ? atol(argv[1]) : 1000;
    for (int i = 0; i < 200; i++) total += top(n + i);
    return (int)(total & 1);
}
"""


def _write(image: ElfImage, target: Path, mode: int = 0o755) -> Path:
    data, _ = inject(image, version=3)
    target.write_bytes(data)
    target.chmod(mode)
    return target


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """gcc's PIE, non-PIE and static programs."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    work = tmp_path_factory.mktemp("built")
    (work / "hello.c").write_text(HELLO)
    (work / "work.c").write_text(WORK)
    out = {}
    for name, source, options in (("pie", "hello.c", ["-pie", "-fPIE"]),
                                  ("no-pie", "hello.c", ["-no-pie", "-fno-PIE"]),
                                  ("static", "hello.c", ["-static"]),
                                  ("work", "work.c", ["-fomit-frame-pointer"])):
        subprocess.run(["gcc", "-O2", *options, "-o", str(work / name), str(work / source)],
                       check=True)
        out[name] = work / name
    return out


@pytest.fixture(scope="module")
def injected(tmp_path_factory: pytest.TempPathFactory, built: dict[str, Path]
             ) -> dict[str, tuple[Path, Path]]:
    """name -> (original, injected copy)."""
    work = tmp_path_factory.mktemp("injected")
    originals = {name: Path(shutil.which(name) or f"/usr/bin/{name}") for name in PROGRAMS}
    originals |= {name: (LIBDIR / name).resolve() for name in LIBRARIES}
    originals |= {f"gcc-{name}": path for name, path in built.items()}
    out = {}
    for name, original in originals.items():
        if not original.exists():
            pytest.skip(f"no {original}")
        (work / name).mkdir()  # the same name: programs print it (gzip --version)
        out[name] = (original, _write(ElfImage(str(original)), work / name / original.name))
    return out


def _is_library(name: str) -> bool:
    return ".so" in name


def test_readelf_shows_gnu_sframe_at_the_loaded_section(
        injected: dict[str, tuple[Path, Path]]) -> None:
    readelf = need_binutils("readelf", "2.47.50")
    for name, (_, path) in injected.items():
        image = ElfImage(str(path))
        (section,) = image.sframe_sections()
        header = image.section_header(".sframe")
        assert header is not None and header.flags & 2 and header.address == section.address
        text = subprocess.run([readelf, "-lW", str(path)], capture_output=True, text=True,
                              check=True).stdout
        row = re.search(r"^\s*GNU_SFRAME\s+(0x\w+) (0x\w+) (0x\w+) (0x\w+) (0x\w+)", text, re.M)
        assert row is not None, f"{name}: no GNU_SFRAME in\n{text}"
        offset, vaddr, _, filesz, _ = (int(field, 16) for field in row.groups())
        assert (offset, vaddr, filesz) == (header.offset, header.address, header.size)
        loads = [s for s in image.program_headers() if s.type == PT_LOAD]
        assert loads[-1].offset <= offset and offset + filesz <= loads[-1].offset + \
            loads[-1].filesz and loads[-1].vaddr - loads[-1].offset == vaddr - offset
        assert [s.vaddr for s in loads] == sorted(s.vaddr for s in loads)


def test_objdump_dumps_the_section(injected: dict[str, tuple[Path, Path]]) -> None:
    objdump = need_binutils("objdump", "2.47.50")
    for name in ("xz", "gcc-pie", "gcc-no-pie", "libz.so.1"):
        path = injected[name][1]
        run = subprocess.run([objdump, "--sframe=.sframe", str(path)], capture_output=True,
                             text=True)
        assert run.returncode == 0 and not run.stderr, f"{name}: {run.stderr}"
        fdes = int(re.search(r"Num FDEs: (\d+)", run.stdout).group(1))  # type: ignore[union-attr]
        assert fdes == len(re.findall(r"func idx \[\d+\]", run.stdout)) > 0


def test_the_programs_run_unchanged(injected: dict[str, tuple[Path, Path]]) -> None:
    for name, (original, path) in injected.items():
        if _is_library(name) or name == "gcc-work":
            continue
        before = subprocess.run([str(original), "--version"], capture_output=True, text=True)
        after = subprocess.run([str(path), "--version"], capture_output=True, text=True)
        assert (after.returncode, after.stdout) == (before.returncode, before.stdout), name
        if name == "gcc-static":
            continue
        verify = subprocess.run([LOADER, "--verify", str(path)], capture_output=True)
        assert verify.returncode == 0, name
        listed = subprocess.run([LOADER, "--list", str(path)], capture_output=True, text=True)
        assert listed.returncode == 0 and "libc.so.6" in listed.stdout, name


def test_a_library_still_loads(injected: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    """The injected libz and libc in place of the system's, by LD_LIBRARY_PATH."""
    for name in LIBRARIES:
        (tmp_path / name).symlink_to(injected[name][1])
    for name in LIBRARIES:  # the same verdict as the original's (2: not a program)
        original, path = injected[name]
        verdicts = {subprocess.run([LOADER, "--verify", str(p)]).returncode
                    for p in (original, path)}
        assert len(verdicts) == 1, name
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    listed = subprocess.run([LOADER, "--list", str(injected["gzip"][1])], capture_output=True,
                            text=True, env=env)
    assert f"libc.so.6 => {tmp_path}/libc.so.6" in listed.stdout, listed.stdout
    # python3 loads libz (zlib module) and libc from the directory.
    run = subprocess.run(["python3", "-c", "import zlib; print(zlib.crc32(b'sframe'))"],
                         capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "1336808732", run.stderr


def _kernel_accepts(data: bytes, address: int) -> None:
    errors = [f for f in validate(memoryview(data), address, kernel=True) if f.severity == ERROR]
    assert not errors, errors


def test_a_started_process_holds_the_section_at_pt_gnu_sframe(
        injected: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    for name, (_, path) in injected.items():
        image = ElfImage(str(path))
        (section,) = image.sframe_sections()
        if _is_library(name):
            soname = name
            found = library_memory(path, soname, tmp_path)
        else:
            found = program_memory(path)
            header = image.header
            table = bytes(image.data[header.phoff:header.phoff + header.phnum *
                                     header.phentsize])
            assert found.phdrs == table, f"{name}: AT_PHDR is not the moved table"
        assert found.sframe == section.raw, name
        _kernel_accepts(found.sframe, found.address)
    # The command itself, on bytes read from memory at their link-time address.
    found = program_memory(injected["xz"][1])
    raw = tmp_path / "xz.mem"
    raw.write_bytes(found.sframe)
    address = ElfImage(str(injected["xz"][1])).sframe_sections()[0].address
    for command in (["validate", "--kernel"], ["dump"]):
        run = subprocess.run([*SFRAME, *command, "--raw", "--address", hex(address), str(raw)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    file_dump = subprocess.run([*SFRAME, "dump", str(injected["xz"][1])], capture_output=True,
                               text=True, check=True).stdout
    assert file_dump.endswith(run.stdout) and run.stdout.count("\n") > 100


def test_build_id_and_debuglink_are_kept(injected: dict[str, tuple[Path, Path]]) -> None:
    for name in ("xz", "bash", "libz.so.1"):
        original, path = (ElfImage(str(p)) for p in injected[name])
        assert path.build_id() == original.build_id() is not None
        link = original.section_header(".gnu_debuglink")
        assert link is not None
        assert path.section_bytes(path.section_header(".gnu_debuglink")) == \
            original.section_bytes(link)  # type: ignore[arg-type]


def _sframe_run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SFRAME, *arguments], capture_output=True, text=True, timeout=120)


def test_what_cannot_be_rewritten_safely_is_refused(built: dict[str, Path],
                                                     tmp_path: Path) -> None:
    source = built["pie"].read_bytes()
    payload = tmp_path / "payload"
    payload.write_bytes(source + b"PAYLOAD\x01")
    no_sections = bytearray(source)
    struct.pack_into("<QHHH", no_sections, 0x28, 0, 0, 0, 0)  # no e_shoff, e_shnum
    struct.pack_into("<H", no_sections, 0x3A, 64)
    headless = tmp_path / "headless"
    headless.write_bytes(bytes(no_sections))
    twice = tmp_path / "twice"
    assert _sframe_run("inject", str(built["pie"]), "-o", str(twice)).returncode == 0
    for path, why in ((payload, "belong to no section"), (headless, "no section headers"),
                      (twice, "already has an SFrame section")):
        before = path.read_bytes()
        out = tmp_path / "out"
        run = _sframe_run("inject", str(path), "-o", str(out))
        assert run.returncode == 1 and why in run.stderr and run.stderr.count("\n") == 1, \
            run.stderr
        assert not out.exists() and path.read_bytes() == before


def test_null_entries_are_reused_in_place(built: dict[str, Path], tmp_path: Path) -> None:
    """Two PT_NULL entries (the PIE's PT_NOTEs blanked, as ``sframe strip`` blanks
    PT_GNU_SFRAME): the table stays where it is, the program runs, its memory holds it."""
    data = bytearray(built["pie"].read_bytes())
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phnum, = struct.unpack_from("<H", data, 0x38)
    notes = [phoff + 56 * i for i in range(phnum)
             if struct.unpack_from("<I", data, phoff + 56 * i)[0] == 4]
    assert len(notes) >= 2
    for at in notes[:2]:
        data[at:at + 56] = bytes(56)
    blanked = tmp_path / "blanked"
    blanked.write_bytes(bytes(data))
    path = _write(ElfImage(str(blanked)), tmp_path / "blanked.inj")
    image = ElfImage(str(path))
    assert image.header.phoff == phoff and image.header.phnum == phnum
    run = subprocess.run([str(path), "--version"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("hello 5 ")
    found = program_memory(path)
    assert found.sframe == image.sframe_sections()[0].raw


def test_stripped_then_injected_again(injected: dict[str, tuple[Path, Path]],
                                      tmp_path: Path) -> None:
    stripped = tmp_path / "stripped"
    assert _sframe_run("strip", str(injected["gcc-no-pie"][1]), "-o",
                       str(stripped)).returncode == 0
    assert not any(s.type == PT_GNU_SFRAME for s in ElfImage(str(stripped)).program_headers())
    again = tmp_path / "again"
    run = _sframe_run("inject", str(stripped), "-o", str(again))
    assert run.returncode == 0, run.stderr
    assert subprocess.run([str(again), "--version"], capture_output=True,
                          text=True).stdout.startswith("hello 5 ")
    assert program_memory(again).sframe == ElfImage(str(again)).sframe_sections()[0].raw


def test_defer_unwinds_an_injected_program_without_assume_sframe(
        injected: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    """perf's build-id cache would hold the original files under the same build ids (the
    copies keep them): a fresh HOME, so that the recorded paths are read. The injected
    program and libc are taken for their PT_GNU_SFRAME; the loader, ld.so, is the
    system's (a program names it by its absolute path), so a sample that walks through it
    (a first call's lazy binding) is cut short there, as it would be in the kernel."""
    perf = need_perf()
    libraries = tmp_path / "lib"
    libraries.mkdir()
    (libraries / "libc.so.6").symlink_to(injected["libc.so.6"][1])
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "LD_LIBRARY_PATH": str(libraries)}
    recording = tmp_path / "perf.data"
    record = subprocess.run([perf, "record", "-q", "--no-bpf-event", "-e", "cpu-clock",
                             "-F", "999", "--call-graph", "dwarf,8192", "-o", str(recording),
                             str(injected["gcc-work"][1]), "1500000"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert record.returncode in (0, 1), record.stderr
    run = subprocess.run([*SFRAME, "defer", str(recording), "-o", str(tmp_path / "out.data"),
                          "--report"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    report = run.stdout + run.stderr
    unwound = re.search(r"unwound\s+([\d,]+)\s+([\d.]+)%", report)
    assert unwound is not None and float(unwound.group(2)) >= 95.0, report
    lacking = [line.split()[0] for line in report.splitlines() if "no PT_GNU_SFRAME" in line]
    assert all(Path(path).name.startswith("ld-linux") for path in lacking), report
