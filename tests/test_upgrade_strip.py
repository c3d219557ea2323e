"""``sframe upgrade`` (V2 sections of objects and archives as V3) and ``sframe strip``.

GNU binutils judge the results (tools/install-oracles.sh installs them; a missing one skips,
and fails under CI=true): objdump 2.44, which made nothing of ours, prints the original V2
rows; objdump 2.46 and 2.47.50 print the upgraded V3 rows, which must be the same. ld
2.47.50 links the upgraded objects: it ignores the V2 originals ("unexpected SFrame section
type") and must keep every function of the upgraded ones, row for row what gas 2.46 makes
of the same sources (linked by the same ld, dumped by the same objdump) but where the older
gas made other rows (named below)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.oracles import need_binutils

from conftest import FIXTURES
from pysframe.elf import ElfImage
from pysframe.format.decode import SFrameReader

pytestmark = pytest.mark.skipif(not (FIXTURES / "2.44").exists(),
                                reason="no fixture objects (../shared/fixtures) here")
SOURCES = ["cfi", "control", "deep", "extras", "main", "many"]
#: Per architecture: the objects linked, the functions gas 2.44 described with other rows
#: than gas 2.46 (an RA kept in a register, an undefined RA, .cfi_remember_state /
#: .cfi_restore_state), and those only gas 2.46 describes (2.44 skipped .cfi_escape, a CFA
#: on another register, DRAP).
LINKED = {
    "x86_64": (["cfi", "control", "deep", "edge", "extras", "main", "many", "realign",
                "recurse", "signals", "stackuse"],
               {"f_register", "f_undef_ra", "f_remember"},
               {"asm_escape_nop", "asm_escape_expr", "f_escape", "f_cfa_rbx", "realigned_vla"}),
    "aarch64": (SOURCES, {"asm_remember"}, {"asm_escape_nop", "asm_escape_expr"}),
}


def sframe(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pysframe", *arguments], capture_output=True,
                          text=True, timeout=120)


#: The objdumps that read V3 (each must print the same rows).
V3_DUMPERS = ["2.47.50"]

#: One function as objdump --sframe prints it: (pc, size, attributes, rows), each row
#: (offset from pc, CFA, FP, RA) as printed.
Rows = tuple[tuple[int, str, str, str], ...]
Dumped = tuple[int, int, str, Rows]


def dumped_functions(objdump: str, path: Path) -> list[Dumped]:
    """The functions of the file's first SFrame section as ``objdump --sframe`` prints
    them, in index order. (objdump 2.44 prints pc = 0 for every function of an object; a
    row's start is kept as its offset from the function's pc.)"""
    run = subprocess.run([objdump, "--sframe", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "warning" not in run.stderr.lower(), run.stderr
    found: list[Dumped] = []
    head = re.compile(r"^ +func idx \[\d+\]: pc = (0x[0-9a-f]+), size = (\d+) bytes(.*)$")
    pc = size = 0
    attributes, rows = "", []
    for line in run.stdout.split("Contents of the SFrame section")[1].splitlines():
        if match := head.match(line):
            if rows or size:
                found.append((pc, size, attributes, tuple(rows)))
            pc, size, attributes, rows = int(match[1], 16), int(match[2]), match[3], []
        elif re.match(r"^ +[0-9a-f]{16} ", line):
            start, cfa, fp, ra = [*line.split(), "", "", ""][:4]
            rows.append((int(start, 16) - pc, cfa, fp, ra))
    if rows or size:
        found.append((pc, size, attributes, tuple(rows)))
    return found


def rows_by_size(functions: list[Dumped]) -> list[tuple[int, str, Rows]]:
    """(size, attributes, rows) in index order: an object's pcs are per text section."""
    return [(size, attributes, rows) for _, size, attributes, rows in functions]


def signal_frames(functions: list[Dumped]) -> list[tuple[int, int]]:
    """(pc, size) of the functions objdump shows with the signal-frame attribute."""
    return [(pc, size) for pc, size, attributes, _ in functions
            if re.search(r'attr = "[^"]*S', attributes)]


def without_signal(functions: list[tuple[int, str, Rows]]) -> list[tuple[int, str, Rows]]:
    """The functions with objdump's signal-frame attribute left out (V2 has none)."""
    return [(size, re.sub(r', attr = ""', "", re.sub(r'(attr = "[^"]*)S', r"\1", attributes)),
             rows) for size, attributes, rows in functions]


def function_names(nm: str, path: Path) -> dict[int, str]:
    """Address -> name of the file's function symbols, as nm prints them."""
    listing = subprocess.run([nm, "--defined-only", str(path)], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    return {int(address, 16): name for address, kind, name in
            (line.split() for line in listing.splitlines() if len(line.split()) == 3)
            if kind in "tT"}


def in_order(path: Path) -> list[tuple[int, list[tuple[int, tuple[int, ...], int]]]]:
    """(size, rows) of each function of the file's first SFrame section, in index order
    (an object's start fields are per text section: not a key)."""
    image = ElfImage(str(path))
    section = image.sframe_sections()[0]
    reader = SFrameReader(section.raw, section.address)
    return [(entry.size, [(fre.start, fre.words, int(fre.base_reg)) for _, fre
                          in reader.fres_with_offsets(entry)]) for entry in reader.fdes()]


def versions(path: Path) -> list[int]:
    image = ElfImage(str(path))
    return [SFrameReader(section.raw, section.address).header.version
            for section in image.sframe_sections()]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_objects_are_upgraded_row_for_row(arch: str, tmp_path: Path) -> None:
    for source in SOURCES:
        original = FIXTURES / "2.44" / arch / "O2" / f"{source}.o"
        before = original.read_bytes()
        out = tmp_path / f"{source}.o"
        run = sframe("upgrade", str(original), "-o", str(out))
        assert run.returncode == 0, run.stderr
        assert original.read_bytes() == before  # untouched
        assert versions(original) == [2] and versions(out) == [3]
        old, new = in_order(original), in_order(out)
        assert old == new  # every function (by size), every row, in order
        image = ElfImage(str(out))
        kinds = {relocation["r_info_type"] for relocation in
                 image.section_by_name(".rela.sframe").iter_relocations()}
        assert kinds == ({24} if arch == "x86_64" else {260})  # PC64 / PREL64


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_objdump_prints_the_upgraded_rows_as_the_original_ones(arch: str,
                                                              tmp_path: Path) -> None:
    """objdump 2.44 prints the original V2 section; objdump 2.46 and 2.47.50 must print the
    same functions and rows from the upgraded V3 one, and place each function where its
    relocated start says (the start fields are right, not only the rows)."""
    older = need_binutils("objdump", "2.44", arch)
    newer = [need_binutils("objdump", version, arch) for version in V3_DUMPERS]
    nm = need_binutils("nm", "2.47.50", arch)
    for source in SOURCES:
        original = FIXTURES / "2.44" / arch / "O2" / f"{source}.o"
        out = tmp_path / f"{source}.o"
        assert sframe("upgrade", str(original), "-o", str(out)).returncode == 0
        expected = rows_by_size(dumped_functions(older, original))
        symbols = function_names(nm, out)
        # V2 cannot mark a signal frame; gas 2.46 marks it from .cfi_signal_frame, and so
        # does the upgrade (from the object's .eh_frame): the same functions as gas 2.46's.
        newest = dumped_functions(newer[-1], FIXTURES / "2.46" / arch / "O2" / f"{source}.o")
        assert signal_frames(dumped_functions(newer[-1], out)) == signal_frames(newest)
        for objdump in newer:
            functions = dumped_functions(objdump, out)
            assert without_signal(rows_by_size(functions)) == expected, (objdump, source)
            # each function starts at a function symbol of the object (one .text here)
            assert {pc for pc, *_ in functions} <= set(symbols), (objdump, source)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_upgraded_objects_link_with_binutils_2_46_and_later(arch: str, tmp_path: Path) -> None:
    ld = need_binutils("ld", "2.47.50", arch)
    nm = need_binutils("nm", "2.47.50", arch)
    dumpers = [need_binutils("objdump", version, arch) for version in V3_DUMPERS]
    names, older_rows, only_newer = LINKED[arch]
    old_dir, new_dir = FIXTURES / "2.44" / arch / "O2", FIXTURES / "2.46" / arch / "O2"
    upgraded = []
    for name in names:
        out = tmp_path / f"{name}.o"
        assert sframe("upgrade", str(old_dir / f"{name}.o"), "-o", str(out)).returncode == 0
        upgraded.append(out)
    ignored = subprocess.run([ld, "-r", "-o", str(tmp_path / "v2.o"),
                              *(str(old_dir / f"{name}.o") for name in names)],
                             capture_output=True, text=True)
    assert "unexpected SFrame section type; section ignored" in ignored.stderr
    linked = tmp_path / "upgraded.o"
    run = subprocess.run([ld, "-r", "-o", str(linked), *map(str, upgraded)],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "SFrame" not in run.stderr, run.stderr
    # gas 2.46's objects of the same sources, linked by the same ld
    reference = tmp_path / "newer.o"
    subprocess.run([ld, "-r", "-o", str(reference), *(str(new_dir / f"{name}.o")
                                                     for name in names)], check=True)
    names_at = function_names(nm, reference)
    expected = sum(len(dumped_functions(dumpers[-1], path)) for path in upgraded)
    for objdump in dumpers:
        ours = {(pc, size): (attributes, rows) for pc, size, attributes, rows
                in dumped_functions(objdump, linked)}
        theirs = {(pc, size): (attributes, rows) for pc, size, attributes, rows
                  in dumped_functions(objdump, reference)}
        assert len(ours) == expected  # every function of every upgraded object kept
        differ = {names_at[start] for (start, size), rows in ours.items()
                  if theirs.get((start, size)) != rows}
        assert differ == older_rows, objdump
        assert {names_at[start] for start, _ in set(theirs) - set(ours)} == only_newer


def test_an_archive_mixing_v2_and_v3_is_upgraded_and_links(tmp_path: Path) -> None:
    if shutil.which("ar") is None:
        pytest.skip("needs ar")
    members = [FIXTURES / "2.44" / "x86_64" / "O2" / "deep.o",
               FIXTURES / "2.46" / "x86_64" / "O2" / "cfi.o",
               FIXTURES / "2.44" / "x86_64" / "O2" / "many.o"]
    archive = tmp_path / "libmixed.a"
    subprocess.run(["ar", "rcs", str(archive), *map(str, members)], check=True)
    out = tmp_path / "libmixed.v3.a"
    run = sframe("upgrade", str(archive), "-o", str(out))
    assert run.returncode == 0 and "2 members upgraded" in run.stderr, run.stderr
    listing = subprocess.run(["ar", "t", str(out)], capture_output=True, text=True, check=True)
    assert listing.stdout.split() == ["deep.o", "cfi.o", "many.o"]
    index = subprocess.run(["nm", "-s", str(out)], capture_output=True, text=True, check=True)
    assert "tc_top in deep.o" in index.stdout
    ld = need_binutils("ld", "2.47.50")
    linked = tmp_path / "linked.o"
    # Through the index (the symbol pulls its member in), and whole.
    pulled = subprocess.run([ld, "-r", "-u", "tc_top", "-o", str(linked), str(out)],
                            capture_output=True, text=True)
    assert pulled.returncode == 0 and "SFrame" not in pulled.stderr, pulled.stderr
    objdump = need_binutils("objdump", "2.47.50")
    assert rows_by_size(dumped_functions(objdump, linked)) == rows_by_size(
        dumped_functions(need_binutils("objdump", "2.44"), members[0]))  # deep.o's, row for row
    whole = subprocess.run([ld, "-r", "--whole-archive", "-o", str(linked), str(out)],
                           capture_output=True, text=True)
    assert whole.returncode == 0 and "SFrame" not in whole.stderr, whole.stderr


def test_strip_leaves_no_sframe_and_the_result_links_and_runs(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    new_dir = FIXTURES / "2.46" / "x86_64" / "O2"
    program = tmp_path / "prog"
    assert sframe("strip", str(new_dir / "prog"), "-o", str(program)).returncode == 0
    assert ElfImage(str(program)).sframe_sections() == []
    program.chmod(0o755)
    original = subprocess.run([str(new_dir / "prog")], capture_output=True, timeout=60)
    ours = subprocess.run([str(program)], capture_output=True, timeout=60)
    assert (ours.returncode, ours.stdout) == (original.returncode, original.stdout)
    objects = []
    for name in ["cfi", "control", "deep", "edge", "extras", "main", "many", "realign",
                 "recurse", "signals", "stackuse"]:
        out = tmp_path / f"{name}.o"
        assert sframe("strip", str(new_dir / f"{name}.o"), "-o", str(out)).returncode == 0
        assert ElfImage(str(out)).sframe_sections() == []
        objects.append(str(out))
    linked = tmp_path / "relinked"
    run = subprocess.run(["gcc", "-o", str(linked), *objects], capture_output=True, text=True)
    assert run.returncode == 0 and "sframe" not in run.stderr, run.stderr  # even an old ld
    again = subprocess.run([str(linked)], capture_output=True, timeout=60)
    assert (again.returncode, again.stdout) == (original.returncode, original.stdout)
    assert sframe("strip", str(objects[0]), "-o", str(tmp_path / "x.o")).returncode == 1
