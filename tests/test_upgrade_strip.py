"""``sframe upgrade`` (V2 sections of objects and archives as V3) and ``sframe strip``.

With a binutils of 2.46 or later unpacked (``../shared/toolchain/install.sh --prefix
../sframe-tc 2.47.50``), the upgraded objects are linked: its ld ignores the V2 originals
("unexpected SFrame section type") and must keep every function of the upgraded ones,
row for row what the newer gas makes of the same sources but where the older gas made
other rows (named below)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def newer_tool(name: str) -> str | None:
    for root in (Path(__file__).resolve().parents[2] / "sframe-tc", Path("/opt/sframe-tc")):
        tool = root / "bin" / f"{name}-2.47.50"
        if tool.exists():
            return str(tool)
    return None


def functions(path: Path) -> dict[tuple[int, int], list[tuple[int, tuple[int, ...], int]]]:
    """(start, size) -> rows of the file's first SFrame section."""
    image = ElfImage(str(path))
    section = image.sframe_sections()[0]
    reader = SFrameReader(section.relocated if image.elf_type == "REL" else section.raw,
                          section.address)
    return {(entry.start, entry.size): [(fre.start, fre.words, int(fre.base_reg)) for _, fre
                                        in reader.fres_with_offsets(entry)]
            for entry in reader.fdes()}


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
def test_upgraded_objects_link_with_binutils_2_46_and_later(arch: str, tmp_path: Path) -> None:
    ld = newer_tool("ld" if arch == "x86_64" else "aarch64-ld")
    if ld is None:
        pytest.skip("no binutils >= 2.46 here: ../shared/toolchain/install.sh --prefix "
                    "../sframe-tc 2.47.50")
    names, older_rows, only_newer = LINKED[arch]
    old_dir, new_dir = FIXTURES / "2.44" / arch / "O2", FIXTURES / "2.46" / arch / "O2"
    upgraded = []
    for name in names:
        out = tmp_path / f"{name}.o"
        assert sframe("upgrade", str(old_dir / f"{name}.o"), "-o", str(out)).returncode == 0
        upgraded.append(str(out))
    ignored = subprocess.run([ld, "-r", "-o", str(tmp_path / "v2.o"),
                              *(str(old_dir / f"{name}.o") for name in names)],
                             capture_output=True, text=True)
    assert "unexpected SFrame section type; section ignored" in ignored.stderr
    linked = tmp_path / "upgraded.o"
    run = subprocess.run([ld, "-r", "-o", str(linked), *upgraded], capture_output=True, text=True)
    assert run.returncode == 0 and "SFrame" not in run.stderr, run.stderr
    expected = sum(len(in_order(Path(path))) for path in upgraded)
    ours = functions(linked)
    assert len(ours) == expected  # every function of every upgraded object kept
    reference = tmp_path / "newer.o"
    subprocess.run([ld, "-r", "-o", str(reference), *(str(new_dir / f"{name}.o")
                                                     for name in names)], check=True)
    theirs = functions(reference)
    names_at = {symbol["st_value"]: symbol.name for symbol in
                ElfImage(str(reference)).section_by_name(".symtab").iter_symbols()
                if symbol["st_info"]["type"] == "STT_FUNC"}
    differ = {names_at[start] for (start, size), rows in ours.items()
              if theirs.get((start, size)) != rows}
    assert differ == older_rows
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
    ld = newer_tool("ld")
    if ld is None:
        return
    linked = tmp_path / "linked.o"
    # Through the index (the symbol pulls its member in), and whole.
    pulled = subprocess.run([ld, "-r", "-u", "tc_top", "-o", str(linked), str(out)],
                            capture_output=True, text=True)
    assert pulled.returncode == 0 and "SFrame" not in pulled.stderr, pulled.stderr
    assert len(in_order(linked)) == len(in_order(members[0]))  # deep.o's functions
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
