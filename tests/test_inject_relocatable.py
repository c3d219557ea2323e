"""``sframe inject`` on relocatable objects (issue 28 item 2): the object gets what
``as --gsframe`` writes, an allocated ``.sframe`` with one ``R_*_PC64`` relocation per FDE
in ``.rela.sframe``, so that ld 2.46 and 2.47.50 link it.

The Must-show: a C/C++ project (recursion, static functions, -O2, a cold path in
``.text.unlikely``, a ``-ffunction-sections`` file, an inline C++ function in a COMDAT group
defined by two files so that ld discards one copy) compiled by gcc with binutils 2.47.50's
``as`` but without ``--gsframe``, its objects injected and linked by ld 2.47.50: the
program runs, and ``objdump --sframe`` (2.47.50) of it prints exactly what it prints for
the same project built with ``-Wa,--gsframe`` (the whole dump, addresses included: the two
links lay the program out the same way), and the linked programs are equal byte for byte.
Per object, the injected ``.sframe`` bytes and ``.rela.sframe`` entries are gas's (AArch64
and s390x from hand-written assembly, linked with their ld 2.47.50); every V3 object of
the shared fixtures, its ``.sframe`` removed, gets its own back byte for byte.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import missing, need_binutils

from conftest import FIXTURES, manifest_entries

MAIN = r"""
#include <stdio.h>
int fact(int n);
int work(int n);
long walk(int depth, const char *name);
int box_a(int x);
int box_b(int x);

static __attribute__((noinline)) int sum_to(int n) { return n <= 0 ? 0 : n + sum_to(n - 1); }

int main(int argc, char **argv) {
    (void)argv;
    printf("%d %d %d %ld %d %d\n", sum_to(argc + 9), fact(argc + 4), work(argc + 2),
           walk(argc + 3, "xyz"), box_a(argc), box_b(argc + 1));
    return 0;
}
"""
LIB = r"""
#include <stdio.h>
#include <stdlib.h>
static __attribute__((noinline)) int triple(int x) { volatile int y = x * 3; return y + 1; }
int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }
__attribute__((noinline, cold)) void oops(const char *what) {
    fprintf(stderr, "%s\n", what);
    abort();
}
int work(int n) {
    if (__builtin_expect(n < 0, 0))
        oops("negative");
    return triple(n) + fact(n);
}
"""
SECTIONS = r"""
#include <string.h>
__attribute__((noinline)) static long frame(int n, const char *name) {
    char buffer[n + 16];                    /* a variable-length array: rbp-based CFA */
    memset(buffer, name[0], sizeof buffer);
    return (long)buffer[n] + n;
}
long walk(int depth, const char *name) {
    return depth == 0 ? frame((int)strlen(name) + 1, name) : walk(depth - 1, name) + 1;
}
"""
BOX_A = r"""
inline __attribute__((noinline)) int twice(int x) { return x + x; }
extern "C" int box_a(int x) { return twice(x) + 1; }
"""
BOX_B = r"""
inline __attribute__((noinline)) int twice(int x) { return x + x; }
extern "C" int box_b(int x) { return twice(x) + 2; }
"""
#: (file, compiler, extra options)
PROJECT = [("main.c", "gcc", []), ("lib.c", "gcc", []),
           ("sections.c", "gcc", ["-ffunction-sections"]), ("box_a.cc", "g++", []),
           ("box_b.cc", "g++", [])]
SOURCES = {"main.c": MAIN, "lib.c": LIB, "sections.c": SECTIONS, "box_a.cc": BOX_A,
           "box_b.cc": BOX_B}
EXPECTED_OUTPUT = "55 120 16 128 3 6\n"


def sframe(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=120)


def driver(version: str) -> Path:
    """gcc's ``-B`` directory whose ``as`` and ``ld`` are binutils ``version``'s."""
    tool = Path(need_binutils("as", version))
    found = tool.parent.parent / "gcc-B" / version / "x86_64"
    if not (found / "as").exists() or not (found / "ld").exists():
        missing(f"gcc's -B directory for binutils {version} ({found})", "tools/install-oracles.sh")
    return found


def compilers() -> None:
    for name in ("gcc", "g++"):
        if shutil.which(name) is None:
            missing(name, "apt-get install g++")


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"{command}: {result.returncode}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The project's objects: ``gas`` (built with -Wa,--gsframe), ``plain`` (without) and
    ``injected`` (the plain ones through ``sframe inject``), in link order."""
    compilers()
    tools = driver("2.47.50")
    root = tmp_path_factory.mktemp("project")
    built: dict[str, list[Path]] = {"gas": [], "plain": [], "injected": []}
    for name, compiler, options in PROJECT:
        source = root / name
        source.write_text(SOURCES[name])
        stem = source.with_suffix("")
        for kind, gsframe in (("gas", ["-Wa,--gsframe"]), ("plain", [])):
            out = Path(f"{stem}.{kind}.o")
            run(compiler, f"-B{tools}/", "-O2", *options, *gsframe, "-c", source, "-o", out)
            built[kind].append(out)
        injected = Path(f"{stem}.injected.o")
        result = sframe("inject", str(built["plain"][-1]), "-o", str(injected))
        assert result.returncode == 0, result.stderr
        built["injected"].append(injected)
    return built


def link(objects: list[Path], output: Path, version: str) -> Path:
    run("g++", f"-B{driver(version)}/", *objects, "-o", output)
    return output


def sframe_dump(path: Path, arch: str = "x86_64") -> str:
    """objdump 2.47.50 ``--sframe`` without its first lines (they name the file)."""
    text = run(need_binutils("objdump", "2.47.50", arch), "--sframe", path).stdout
    return text.split("Contents of the SFrame section", 1)[1]


def section_facts(path: Path, arch: str = "x86_64") -> tuple[str, str, str]:
    """(the .sframe section header without its file offset, its contents in hex, the entries
    of .rela.sframe) as binutils 2.47.50 prints them."""
    readelf = need_binutils("readelf", "2.47.50", arch)
    headers = run(readelf, "-SW", path).stdout
    line = next(row for row in headers.splitlines() if re.search(r"\] \.sframe ", row))
    fields = line.split("]", 1)[1].split()
    header = " ".join(fields[:3] + fields[5:])  # name, type, address, size, es, flags, ...
    contents = run(readelf, "-x", ".sframe", path).stdout
    contents = contents[contents.index("0x00000000"):]
    relocations = run(readelf, "-rW", path).stdout
    rela = relocations[relocations.index("'.rela.sframe'"):].split("\n\n")[0]
    return header, contents, rela.split("\n", 1)[1]


# --- the Must-show ---------------------------------------------------------------------------

def test_injected_objects_are_what_gas_writes(project: dict[str, list[Path]]) -> None:
    for gas, injected in zip(project["gas"], project["injected"], strict=True):
        assert section_facts(injected) == section_facts(gas), injected.name
        assert sframe("validate", str(injected)).returncode == 0


def test_linked_program_runs_and_its_sframe_is_the_gas_builds(
        project: dict[str, list[Path]], tmp_path: Path) -> None:
    """ld 2.47.50 links the injected objects; the program runs, and its .sframe (objdump's
    whole dump, addresses included, and the section's bytes) is the -Wa,--gsframe build's."""
    from pysframe.elf import ElfImage

    reference = link(project["gas"], tmp_path / "with-gsframe", "2.47.50")
    program = link(project["injected"], tmp_path / "injected", "2.47.50")
    assert run(program).stdout == run(reference).stdout == EXPECTED_OUTPUT
    dump = sframe_dump(program)
    assert dump == sframe_dump(reference)
    # The project's 13 functions (work's cold part included) but the discarded copy of
    # twice(), and ld's PLT and crt entries.
    assert dump.count("func idx") >= 12 and "fp+16" in dump  # frame()'s rbp-based rows
    ours, theirs = ElfImage(str(program)), ElfImage(str(reference))
    assert ours.sframe_sections()[0].raw == theirs.sframe_sections()[0].raw
    # Nothing else differs either: .sframe is an input section like gas's, in the same place.
    assert program.read_bytes() == reference.read_bytes()
    assert sframe("validate", "--kernel", str(program)).returncode == 0


def test_ld_246_links_the_injected_objects(project: dict[str, list[Path]],
                                           tmp_path: Path) -> None:
    reference = link(project["gas"], tmp_path / "with-gsframe", "2.46")
    program = link(project["injected"], tmp_path / "injected", "2.46")
    assert run(program).stdout == EXPECTED_OUTPUT
    assert sframe_dump(program) == sframe_dump(reference)


def test_the_old_output_is_rejected_by_validate(project: dict[str, list[Path]],
                                                tmp_path: Path) -> None:
    """What inject wrote before (a .sframe neither allocated nor relocated: ld 2.47.50 died
    of SIGSEGV linking it) is rejected by validate; ld links what inject writes now."""
    injected = project["injected"][1]
    old = tmp_path / "old.o"
    old.write_bytes(_as_before(injected.read_bytes()))
    result = sframe("validate", str(old))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "not allocated (SHF_ALLOC)" in lines[0]
    assert sum("the start field has no relocation" in line for line in lines) == 5
    linked = subprocess.run(["g++", f"-B{driver('2.47.50')}/", *map(str, project["injected"]),
                             "-o", str(tmp_path / "program")], capture_output=True, text=True,
                            timeout=120)
    assert linked.returncode == 0 and "signal" not in linked.stderr


def test_validate_finds_a_misplaced_start_relocation(project: dict[str, list[Path]],
                                                     tmp_path: Path) -> None:
    from pysframe.elf import ElfImage

    data = bytearray(project["injected"][1].read_bytes())
    image = ElfImage("object", bytes(data))
    table, section = image.section_header(".rela.sframe"), image.section_header(".sframe")
    assert table is not None and section is not None
    struct.pack_into("<Q", data, table.offset + 24, 0x20)  # entry 1: inside FDE 0
    moved = tmp_path / "moved.o"
    moved.write_bytes(bytes(data))
    result = sframe("validate", str(moved))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{moved}, offset {section.offset + 0x20:#x} (.sframe+0x20): .rela.sframe entry 1 "
        "(type 24) relocates offset 0x20, which is no FDE's start field [relocations]",
        f"{moved}, FDE 1, offset {section.offset + 0x2c:#x} (.sframe+0x2c): the start "
        "field has no relocation (ld cannot tell which function the FDE describes) "
        "[relocations]"]


def _as_before(data: bytes) -> bytes:
    """The injected object as the old inject left it: .sframe not allocated (flags 0) and
    no .rela.sframe (the last section header, dropped)."""
    out = bytearray(data)
    shoff, = struct.unpack_from("<Q", out, 0x28)
    shnum, = struct.unpack_from("<H", out, 0x3C)
    struct.pack_into("<Q", out, shoff + (shnum - 2) * 64 + 8, 0)  # .sframe's sh_flags
    struct.pack_into("<H", out, 0x3C, shnum - 1)
    return bytes(out)


# --- refusals ----------------------------------------------------------------------------

def test_objects_it_cannot_describe_are_refused(project: dict[str, list[Path]],
                                                tmp_path: Path) -> None:
    compilers()
    tools = driver("2.47.50")
    source = tmp_path / "nocfi.c"
    source.write_text("int add(int a, int b) { return a + b; }\n")
    no_cfi = tmp_path / "nocfi.o"
    run("gcc", f"-B{tools}/", "-O2", "-fno-asynchronous-unwind-tables", "-c", source, "-o",
        no_cfi)
    unrelocated = tmp_path / "unrelocated.o"
    unrelocated.write_bytes(_without_eh_frame_relocations(project["plain"][1].read_bytes()))
    cases = [(project["gas"][0], "already has an SFrame section"),
             (no_cfi, "no .eh_frame or .debug_frame section"),
             (unrelocated, "no relocation names its function")]
    for path, message in cases:
        output = tmp_path / "out.o"
        before = path.read_bytes()
        result = sframe("inject", str(path), "-o", str(output))
        assert result.returncode == 1, result.stderr
        assert message in result.stderr and len(result.stderr.splitlines()) == 1
        assert not output.exists() and path.read_bytes() == before


def _without_eh_frame_relocations(data: bytes) -> bytes:
    """The object with .rela.eh_frame pointed at section 0 (it relocates nothing)."""
    from pysframe.elf import ElfImage

    image = ElfImage("object", data)
    table = image.section_header(".rela.eh_frame")
    assert table is not None
    out = bytearray(data)
    struct.pack_into("<I", out, image.header.shoff + table.number * 64 + 44, 0)  # sh_info
    return bytes(out)


def test_version_2_objects_carry_32_bit_relocations(project: dict[str, list[Path]],
                                                    tmp_path: Path) -> None:
    from pysframe.elf import ElfImage
    from pysframe.elf.relocations import read_relocations, relocation_tables
    from pysframe.format.decode import decode

    output = tmp_path / "v2.o"
    result = sframe("inject", "--sframe-version", "2", str(project["plain"][1]), "-o",
                    str(output))
    assert result.returncode == 0, result.stderr
    image = ElfImage(str(output))
    header = image.section_header(".sframe")
    assert header is not None
    entries = [r for table in relocation_tables(image, header.number)
               for r in read_relocations(image, table)]
    count = decode(image.section_bytes(header)).fdes
    assert len(count) == 5  # oops, fact, triple, work and its cold part
    assert [(r.offset, r.type) for r in entries] == [(28 + 20 * i, 2) for i in range(5)]
    assert sframe("validate", str(output)).returncode == 0
    assert "SFRAME_VERSION_2" in sframe_dump(output)


# --- AArch64 and s390x -----------------------------------------------------------------------

AARCH64 = """
\t.text
\t.globl outer
\t.type outer, %function
outer:
\t.cfi_startproc
\tstp x29, x30, [sp, -32]!
\t.cfi_def_cfa_offset 32
\t.cfi_offset 29, -32
\t.cfi_offset 30, -24
\tmov x29, sp
\tbl leaf
\tbl shared
\tldp x29, x30, [sp], 32
\t.cfi_restore 30
\t.cfi_restore 29
\t.cfi_def_cfa_offset 0
\tret
\t.cfi_endproc
\t.section .text.leaf,"ax",%progbits
\t.type leaf, %function
leaf:
\t.cfi_startproc
\tret
\t.cfi_endproc
\t.section .text.shared,"axG",%progbits,shared,comdat
\t.weak shared
\t.type shared, %function
shared:
\t.cfi_startproc
\tsub sp, sp, #16
\t.cfi_def_cfa_offset 16
\tadd sp, sp, #16
\t.cfi_def_cfa_offset 0
\tret
\t.cfi_endproc
"""
S390X = """
\t.text
\t.globl outer
\t.type outer, @function
outer:
\t.cfi_startproc
\tstmg %r11,%r15,88(%r15)
\t.cfi_offset 11, -72
\t.cfi_offset 14, -48
\t.cfi_offset 15, -40
\taghi %r15,-160
\t.cfi_def_cfa_offset 320
\tbrasl %r14,leaf
\tbrasl %r14,shared
\tlmg %r11,%r15,248(%r15)
\t.cfi_restore 15
\t.cfi_restore 14
\t.cfi_restore 11
\t.cfi_def_cfa_offset 160
\tbr %r14
\t.cfi_endproc
\t.section .text.leaf,"ax",@progbits
\t.type leaf, @function
leaf:
\t.cfi_startproc
\tbr %r14
\t.cfi_endproc
\t.section .text.shared,"axG",@progbits,shared,comdat
\t.weak shared
\t.type shared, @function
shared:
\t.cfi_startproc
\tlgr %r1,%r15
\t.cfi_register 15, 1
\taghi %r15,-160
\t.cfi_def_cfa_offset 320
\tlgr %r15,%r1
\t.cfi_def_cfa_offset 160
\tbr %r14
\t.cfi_endproc
"""


@pytest.mark.parametrize("arch,assembly", [("aarch64", AARCH64), ("s390x", S390X)])
def test_other_architectures(arch: str, assembly: str, tmp_path: Path) -> None:
    """Hand-written assembly (three text sections, one a COMDAT group) assembled by gas
    2.47.50 with and without --gsframe: the injected object is gas's, and ld 2.47.50 links
    both to the same SFrame rows."""
    gas = need_binutils("as", "2.47.50", arch)
    ld = need_binutils("ld", "2.47.50", arch)
    source = tmp_path / "unit.s"
    source.write_text(assembly)
    reference, plain, injected = (tmp_path / f"{kind}.o" for kind in ("gas", "plain", "inj"))
    run(gas, "--gsframe", source, "-o", reference)
    run(gas, source, "-o", plain)
    result = sframe("inject", str(plain), "-o", str(injected))
    assert result.returncode == 0, result.stderr
    assert section_facts(injected, arch) == section_facts(reference, arch)
    assert sframe("validate", str(injected)).returncode == 0
    programs = []
    for obj in (reference, injected):
        programs.append(tmp_path / f"{obj.stem}.linked")
        run(ld, "-e", "outer", obj, "-o", programs[-1])
    dump = sframe_dump(programs[1], arch)
    assert dump == sframe_dump(programs[0], arch) and dump.count("func idx") == 3


# --- every V3 object of the fixtures -------------------------------------------------------

OBJECTS = [e for e in manifest_entries() if e["elf_type"] == "REL" and e["toolchain"] in
           ("2.46", "2.47.50") and not str(e["path"]).endswith(".r.o")]


@pytest.mark.skipif(not OBJECTS, reason="../shared/fixtures is not present")
def test_fixture_objects_get_their_own_sframe_back(tmp_path: Path) -> None:
    """Each V3 object gas assembled for the fixtures (x86-64, AArch64, s390x), its .sframe
    and .rela.sframe removed by objcopy: inject gives the same section bytes and the same
    relocations (offset, type, symbol, addend)."""
    from pysframe.elf import ElfImage
    from pysframe.elf.relocations import read_relocations, relocation_tables
    from pysframe.generate.inject import inject

    def facts(image: ElfImage) -> tuple[bytes, int, list[tuple[int, int, int, int]]]:
        header = image.section_header(".sframe")
        assert header is not None
        return image.section_bytes(header), header.flags, [
            r[1:] for table in relocation_tables(image, header.number)
            for r in read_relocations(image, table)]

    checked = 0
    for entry in OBJECTS:
        path = FIXTURES / entry["path"]
        objcopy = need_binutils("objcopy", "2.47.50", entry["arch"])
        bare = tmp_path / "bare.o"
        run(objcopy, "--remove-section", ".sframe", "--remove-section", ".rela.sframe", path,
            bare)
        data, _ = inject(ElfImage(str(bare)))
        assert facts(ElfImage("injected", data)) == facts(ElfImage(str(path))), entry["path"]
        checked += 1
    assert checked == len(OBJECTS) >= 200


def test_mutated_objects_are_refused_in_one_line(project: dict[str, list[Path]]) -> None:
    """Objects whose section headers were mutated (as test_rewrite_fuzz mutates them), and
    whose relocation tables and symbols were: inject refuses with an input error, never
    fails with anything else."""
    import random

    from pysframe.elf import ElfImage
    from pysframe.errors import PysframeError
    from pysframe.generate.inject import inject
    from test_rewrite_fuzz import mutated

    original = project["plain"][1].read_bytes()
    image = ElfImage("object", original)
    tables = [h for h in image.section_headers() if h.name in (".rela.eh_frame", ".symtab")]
    rng = random.Random("inject-relocatable")
    for case in range(300):
        data = bytearray(mutated(original, rng) if case % 2 else original)
        if case % 3 == 0:  # a relocation entry or symbol: some bytes of it
            table = rng.choice(tables)
            for _ in range(rng.randint(1, 4)):
                data[table.offset + rng.randrange(table.size)] = rng.randrange(256)
        try:
            inject(ElfImage(f"case-{case}", bytes(data)))
        except PysframeError as error:
            assert "\n" not in str(error)
