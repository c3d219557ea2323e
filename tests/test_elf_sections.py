"""The ELF layer: finding .sframe (type, name, PT_GNU_SFRAME), relocations, target names."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, manifest_entries, needs_fixtures
from pysframe.cli.errors import exit_code_for
from pysframe.elf import ElfError, ElfImage
from pysframe.format.decode import SFrameReader

ENTRIES = manifest_entries()


@needs_fixtures
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: str(e["path"]))
def test_section_found_and_target_named_like_objdump(entry: dict[str, Any]) -> None:
    image = ElfImage(str(FIXTURES / entry["path"]))
    second_line = (FIXTURES / entry["sframe_dump"]).read_text().splitlines()[1]
    assert image.target_name == second_line.split("file format ")[1]
    sections = image.sframe_sections()
    assert len(sections) == 1
    # 2.45 introduced SHT_GNU_SFRAME; 2.40 and 2.44 wrote SHT_PROGBITS named .sframe.
    expected = "section-name" if entry["toolchain"] in ("2.40", "2.44") else "section-type"
    assert sections[0].found_by == expected
    assert sections[0].has_relocations == (entry["elf_type"] == "REL")


@needs_fixtures
def test_relocated_v3_starts_are_the_function_offsets() -> None:
    path = FIXTURES / "2.46" / "s390x" / "O2" / "cfi.o"  # big-endian RELA, R_390_PC64
    section = ElfImage(str(path)).sframe_sections()[0]
    reader = SFrameReader(section.relocated, section.address)
    dump = (FIXTURES / "2.46" / "s390x" / "O2" / "cfi.o.objdump.txt").read_text()
    expected = [int(line.split("pc = ")[1].split(",")[0], 16) for line in dump.splitlines()
                if "func idx" in line]
    assert [reader.fde_start(i) for i in range(reader.num_fdes)] == expected
    raw = SFrameReader(section.raw, section.address)
    assert [raw.fde_start(i) for i in range(raw.num_fdes)] != expected


def strip_section_headers(data: bytes) -> bytes:
    out = bytearray(data)
    big = out[5] == 2
    order = ">" if big else "<"
    struct.pack_into(order + "Q", out, 0x28, 0)      # e_shoff
    struct.pack_into(order + "HHH", out, 0x3A, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    return bytes(out)


@needs_fixtures
@pytest.mark.parametrize("label, arch", [("2.40", "x86_64"), ("2.46", "s390x"),
                                         ("2.47.50", "aarch64")])
def test_pt_gnu_sframe_when_section_headers_are_stripped(tmp_path: Path, label: str,
                                                         arch: str) -> None:
    original = FIXTURES / label / arch / "O2" / "prog"
    stripped = tmp_path / "prog"
    stripped.write_bytes(strip_section_headers(original.read_bytes()))
    by_section = ElfImage(str(original)).sframe_sections()[0]
    by_segment = ElfImage(str(stripped)).sframe_sections()[0]
    assert by_segment.found_by == "segment"
    assert by_segment.raw == by_section.raw  # p_filesz is longer: the length came from the header
    assert by_segment.address == by_section.address


def test_not_elf_and_truncated(tmp_path: Path) -> None:
    text = tmp_path / "text"
    text.write_text("not an elf file\n")
    with pytest.raises(ElfError) as info:
        ElfImage(str(text))
    assert exit_code_for(info.value) == 1 and "\n" not in str(info.value)
    with pytest.raises(ElfError) as info:
        ElfImage(str(tmp_path / "absent"))
    assert exit_code_for(info.value) == 2


@needs_fixtures
def test_truncated_section_names_offset(tmp_path: Path) -> None:
    data = (FIXTURES / "2.46" / "x86_64" / "O2" / "prog").read_bytes()
    cut = tmp_path / "cut"
    cut.write_bytes(data[:-2000])  # section headers at the end are cut off
    with pytest.raises(ElfError) as info:
        ElfImage(str(cut)).sframe_sections()
    assert exit_code_for(info.value) == 1 and "\n" not in str(info.value)


@needs_fixtures
def test_build_id_and_executable_ranges() -> None:
    lua = FIXTURES / "real" / "lua-2.46-x86_64" / "lua"
    image = ElfImage(str(lua))
    build_id = image.build_id()
    assert build_id is not None and build_id.hex() == "56dff16ba45086a226836ebe3fe068b05a1676a5"
    ranges = image.executable_ranges()
    reader = SFrameReader(image.sframe_sections()[0].raw, image.sframe_sections()[0].address)
    assert all(any(lo <= reader.fde_start(i) < hi for lo, hi in ranges)
               for i in range(reader.num_fdes))


@needs_fixtures
def test_quick_reader_agrees_with_pyelftools() -> None:
    from pysframe.elf.quick import quick_sframe_sections

    for entry in ENTRIES:
        data = (FIXTURES / entry["path"]).read_bytes()
        quick = quick_sframe_sections(data)
        if entry["elf_type"] == "REL":
            assert quick is None  # relocatable objects need the relocating reader
            continue
        assert quick is not None
        image = ElfImage(str(FIXTURES / entry["path"]), data)
        target, sections = quick
        assert target == image.target_name
        full = image.sframe_sections()
        assert [(s.name, s.address, s.file_offset, s.raw) for s in sections] == [
            (s.name, s.address, s.file_offset, s.raw) for s in full]
    assert quick_sframe_sections(strip_section_headers(
        (FIXTURES / "2.46" / "x86_64" / "O2" / "prog").read_bytes())) is None
