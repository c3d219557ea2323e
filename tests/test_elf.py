"""pysframe.elf.sections against the fixture corpus (../shared/fixtures, read in place).

Independent of pysframe.format: V3 FDE start fields are read here by hand
(s64 at section offset 28 + 16*i, in the file's byte order).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from pysframe.cli.errors import exit_code_for
from pysframe.elf import ElfError, ElfImage, SFrameSectionData, is_elf

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
MANIFEST = FIXTURES / "manifest.json"

needs_fixtures = pytest.mark.skipif(not MANIFEST.exists(),
                                    reason="../shared/fixtures is not present")


def _entries() -> list[dict[str, Any]]:
    if not MANIFEST.exists():
        return []
    files: list[dict[str, Any]] = json.loads(MANIFEST.read_text())["files"]
    return files


ENTRIES = _entries()
FUNC_PC = re.compile(r"^\s*func idx \[(\d+)\]: pc = (0x[0-9a-f]+),")


def dump_lines(entry: dict[str, Any]) -> list[str]:
    return (FIXTURES / str(entry["sframe_dump"])).read_text().splitlines()


def only_section(path: Path, data: bytes | None = None) -> SFrameSectionData:
    sections = ElfImage(str(path), data).sframe_sections()
    assert len(sections) == 1
    return sections[0]


@needs_fixtures
def test_manifest_is_complete() -> None:
    assert len(ENTRIES) == json.loads(MANIFEST.read_text())["count"] == 500


@needs_fixtures
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: str(e["path"]))
def test_fixture(entry: dict[str, Any]) -> None:
    path = FIXTURES / entry["path"]
    data = path.read_bytes()
    assert is_elf(data)
    image = ElfImage(str(path), data)
    lines = dump_lines(entry)
    assert image.target_name == lines[1].split("file format ", 1)[1].strip()
    assert image.elf_type == entry["elf_type"]
    assert image.machine.startswith("EM_")

    section = only_section(path, data)
    assert section.name == ".sframe"
    assert section.big_endian == (entry["endianness"] == "big")
    # SHT_GNU_SFRAME since binutils 2.45; 2.40 and 2.44 wrote SHT_PROGBITS named .sframe.
    expected = "section-name" if entry["toolchain"] in ("2.40", "2.44") else "section-type"
    assert section.found_by == expected
    assert section.raw == data[section.file_offset:section.file_offset + len(section.raw)]
    assert section.raw[:2] == (b"\xde\xe2" if section.big_endian else b"\xe2\xde")
    assert section.raw[2] == entry["sframe_version"]
    assert len(section.relocated) == len(section.raw)
    # Every relocatable fixture has a .rela.sframe; linked files have none applied.
    assert section.has_relocations == (entry["elf_type"] == "REL")
    if not section.has_relocations:
        assert section.relocated == section.raw
    if entry["elf_type"] == "REL":
        assert section.address == 0
    else:
        assert section.address != 0 or entry["kind"] == "shared-library"

    if entry["sframe_version"] == 3 and entry["elf_type"] == "REL":
        # The relocated V3 start fields reproduce objdump's `pc = ` (PCREL: field + value).
        order = ">" if section.big_endian else "<"
        num_fdes = struct.unpack_from(order + "I", section.relocated, 8)[0]
        assert num_fdes == entry["num_fdes"]
        pcs = {}
        for line in lines:
            match = FUNC_PC.match(line)
            if match:
                pcs[int(match.group(1))] = int(match.group(2), 16)
        assert sorted(pcs) == list(range(num_fdes))
        for i in range(num_fdes):
            at = 28 + 16 * i
            value = struct.unpack_from(order + "q", section.relocated, at)[0]
            assert (at + value) % 2**64 == pcs[i], f"FDE {i}"
        if num_fdes:
            assert section.relocated != section.raw


def strip_section_headers(data: bytes) -> bytes:
    """e_shoff = e_shnum = e_shstrndx = 0 (ELF64), as a header-stripping tool leaves it."""
    out = bytearray(data)
    order = ">" if out[5] == 2 else "<"
    struct.pack_into(order + "Q", out, 0x28, 0)  # e_shoff
    struct.pack_into(order + "H", out, 0x3C, 0)  # e_shnum
    struct.pack_into(order + "H", out, 0x3E, 0)  # e_shstrndx
    return bytes(out)


def sframe_segment(data: bytes) -> tuple[int, int]:
    """(p_offset, p_filesz) of the PT_GNU_SFRAME program header of an ELF64 file."""
    order = ">" if data[5] == 2 else "<"
    phoff = struct.unpack_from(order + "Q", data, 0x20)[0]
    phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            order + "IIQQQQ", data, phoff + i * phentsize)
        if p_type == 0x6474E554:
            return p_offset, p_filesz
    raise AssertionError("no PT_GNU_SFRAME")


@needs_fixtures
@pytest.mark.parametrize("relative", ["2.46/x86_64/O2/prog", "2.47.50/s390x/O0/prog-nopie",
                                      "2.40/aarch64/pac/libt.so", "2.44/x86_64/O2/prog-nopie"])
def test_pt_gnu_sframe_without_section_headers(tmp_path: Path, relative: str) -> None:
    original = FIXTURES / relative
    data = original.read_bytes()
    stripped = tmp_path / original.name
    stripped.write_bytes(strip_section_headers(data))

    by_section = only_section(original)
    image = ElfImage(str(stripped))
    by_segment = only_section(stripped)
    assert by_segment.found_by == "segment"
    assert by_segment.raw == by_segment.relocated == by_section.raw
    assert by_segment.address == by_section.address
    assert by_segment.file_offset == by_section.file_offset
    assert by_segment.big_endian == by_section.big_endian
    assert not by_segment.has_relocations
    _, filesz = sframe_segment(data)
    assert filesz > len(by_section.raw)  # ld's p_filesz is too long; the header gave the length
    assert image.sframe_sections(".sframe.other") == []
    # The notes and code ranges still come from the program headers.
    assert image.build_id() == ElfImage(str(original)).build_id()
    assert image.executable_ranges() == ElfImage(str(original)).executable_ranges()


@needs_fixtures
def test_pt_gnu_sframe_longer_than_segment(tmp_path: Path) -> None:
    data = bytearray(strip_section_headers((FIXTURES / "2.46/x86_64/O2/prog").read_bytes()))
    offset, filesz = sframe_segment(bytes(data))
    struct.pack_into("<I", data, offset + 0x10, filesz)  # fre_len: past the segment
    bad = tmp_path / "prog"
    bad.write_bytes(bytes(data))
    with pytest.raises(ElfError) as info:
        ElfImage(str(bad)).sframe_sections()
    assert exit_code_for(info.value) == 1 and info.value.offset == offset
    assert "\n" not in str(info.value)


def rela_sframe(data: bytes) -> tuple[int, int]:
    """(sh_offset, sh_entsize) of .rela.sframe in an ELF64 object, read by hand."""
    order = ">" if data[5] == 2 else "<"
    shoff = struct.unpack_from(order + "Q", data, 0x28)[0]
    shnum, shstrndx = struct.unpack_from(order + "HH", data, 0x3C)
    header = struct.Struct(order + "IIQQQQIIQQ")
    sections = [header.unpack_from(data, shoff + i * header.size) for i in range(shnum)]
    names = sections[shstrndx][4]
    for sh_name, *_, sh_offset, _, _, _, _, sh_entsize in sections:
        if data[names + sh_name:].startswith(b".rela.sframe\0"):
            return sh_offset, sh_entsize
    raise AssertionError("no .rela.sframe")


@needs_fixtures
@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "s390x"])
def test_relocation_errors(tmp_path: Path, arch: str) -> None:
    data = (FIXTURES / "2.46" / arch / "O2" / "cfi.o").read_bytes()
    order = ">" if data[5] == 2 else "<"
    rela, entsize = rela_sframe(data)
    entry = rela + 2 * entsize
    path = tmp_path / "cfi.o"

    unknown = bytearray(data)
    struct.pack_into(order + "I", unknown, entry + (12 if order == "<" else 8), 0x7F)  # r_type
    path.write_bytes(bytes(unknown))
    with pytest.raises(ElfError) as info:
        ElfImage(str(path)).sframe_sections()
    assert exit_code_for(info.value) == 1 and info.value.offset == entry
    assert ".rela.sframe" in str(info.value) and "\n" not in str(info.value)

    outside = bytearray(data)
    struct.pack_into(order + "Q", outside, entry, 0x100000)  # r_offset
    path.write_bytes(bytes(outside))
    with pytest.raises(ElfError) as info:
        ElfImage(str(path)).sframe_sections()
    assert exit_code_for(info.value) == 1 and info.value.offset == entry
    assert ".rela.sframe" in str(info.value) and "0x100000" in str(info.value)


def test_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "text"
    text.write_text("not an elf file\n")
    assert not is_elf(text.read_bytes())
    with pytest.raises(ElfError) as info:
        ElfImage(str(text))
    assert exit_code_for(info.value) == 1
    assert str(info.value).startswith(str(text) + ": ") and "\n" not in str(info.value)
    assert info.value.offset == 0 and info.value.path == str(text)


def test_unreadable(tmp_path: Path) -> None:
    for path in (tmp_path / "absent", tmp_path):  # missing, and a directory
        with pytest.raises(ElfError) as info:
            ElfImage(str(path))
        assert exit_code_for(info.value) == 2
        assert str(info.value).startswith(str(path) + ": ") and "\n" not in str(info.value)


@needs_fixtures
@pytest.mark.parametrize("relative", ["2.46/x86_64/O2/prog", "2.46/s390x/O2/cfi.o"])
def test_truncated(tmp_path: Path, relative: str) -> None:
    data = (FIXTURES / relative).read_bytes()
    for length in (100, 60, len(data) - 100):
        cut = tmp_path / "cut"
        cut.write_bytes(data[:length])
        with pytest.raises(ElfError) as info:
            ElfImage(str(cut)).sframe_sections()
        message = str(info.value)
        assert exit_code_for(info.value) == 1 and "\n" not in message
        assert message.startswith(f"{cut}: ") and info.value.offset is not None
        assert message.endswith(f" at offset {info.value.offset:#x}")


@needs_fixtures
def test_section_past_end_of_file(tmp_path: Path) -> None:
    original = FIXTURES / "2.46/aarch64/O2/prog"
    data = bytearray(original.read_bytes())
    section = only_section(original)
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shnum = struct.unpack_from("<H", data, 0x3C)[0]
    for at in range(shoff, shoff + 64 * shnum, 64):
        sh_type, sh_offset = struct.unpack_from("<I", data, at + 4)[0], data[at + 24:at + 32]
        if sh_type == 0x6FFFFFF4 and int.from_bytes(sh_offset, "little") == section.file_offset:
            struct.pack_into("<Q", data, at + 32, len(data))  # sh_size: past the end
            break
    else:
        raise AssertionError("no .sframe section header")
    path = tmp_path / "prog"
    path.write_bytes(bytes(data))
    with pytest.raises(ElfError) as info:
        ElfImage(str(path)).sframe_sections()
    assert exit_code_for(info.value) == 1 and info.value.offset == section.file_offset
    assert "past the end" in str(info.value) and "\n" not in str(info.value)


@needs_fixtures
def test_bad_section_header_table(tmp_path: Path) -> None:
    data = bytearray((FIXTURES / "2.46/x86_64/O2/cfi.o").read_bytes())
    struct.pack_into("<H", data, 0x3A, 12)  # e_shentsize
    path = tmp_path / "cfi.o"
    path.write_bytes(bytes(data))
    with pytest.raises(ElfError) as info:
        ElfImage(str(path))
    assert exit_code_for(info.value) == 1 and info.value.offset == 0x3A


@needs_fixtures
def test_build_id_and_executable_ranges() -> None:
    lua = ElfImage(str(FIXTURES / "real" / "lua-2.46-x86_64" / "lua"))
    build_id = lua.build_id()
    assert build_id is not None and build_id.hex() == "56dff16ba45086a226836ebe3fe068b05a1676a5"
    ranges = lua.executable_ranges()
    assert ranges and all(lo < hi for lo, hi in ranges)

    obj = ElfImage(str(FIXTURES / "2.46" / "x86_64" / "O2" / "cfi.o"))
    assert obj.build_id() is None
    # .text and .text.unlikely, both at address 0 in a relocatable object.
    assert len(obj.executable_ranges()) >= 2
    assert all(lo == 0 for lo, _ in obj.executable_ranges())


def minimal_elf(elf_class: int, data: int, machine: int) -> bytes:
    """An ELF header with no program or section headers."""
    order = ">" if data == 2 else "<"
    ident = b"\x7fELF" + bytes([elf_class, data, 1]) + bytes(9)
    if elf_class == 2:
        rest = struct.pack(order + "HHIQQQIHHHHHH", 1, machine, 1, 0, 0, 0, 0, 64, 56, 0, 64, 0, 0)
    else:
        rest = struct.pack(order + "HHIIIIIHHHHHH", 1, machine, 1, 0, 0, 0, 0, 52, 32, 0, 40, 0, 0)
    return ident + rest


@pytest.mark.parametrize("elf_class, data, machine, expected", [
    (2, 1, 62, "elf64-x86-64"), (1, 1, 62, "elf32-x86-64"), (1, 1, 3, "elf32-i386"),
    (2, 1, 183, "elf64-littleaarch64"), (2, 2, 183, "elf64-bigaarch64"),
    (1, 1, 40, "elf32-littlearm"), (1, 2, 40, "elf32-bigarm"),
    (2, 2, 22, "elf64-s390"), (1, 2, 22, "elf32-s390"),
    (2, 1, 0x1234, "elf64-little"), (2, 2, 0x1234, "elf64-big"),
    (1, 1, 0x1234, "elf32-little"), (1, 2, 0x1234, "elf32-big"),
])
def test_target_names(elf_class: int, data: int, machine: int, expected: str) -> None:
    image = ElfImage("synthetic", minimal_elf(elf_class, data, machine))
    assert image.target_name == expected
    assert image.elf_type == "REL"
    assert image.sframe_sections() == []
    assert image.build_id() is None
