"""The CFI decoder (groundwork for generating SFrame from .eh_frame)."""

from __future__ import annotations

from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import FIXTURES, needs_fixtures
from pysframe.cfi.eh_frame import cie_instructions, fde_instructions, parse_eh_frame
from pysframe.cfi.instructions import (
    DW_CFA_advance_loc,
    DW_CFA_def_cfa,
    DW_CFA_def_cfa_offset,
    DW_CFA_GNU_args_size,
    DW_CFA_offset,
    decode_instructions,
)
from pysframe.cfi.leb128 import DecodeError
from pysframe.format.decode import SFrameReader


def eh_frame(path: Path) -> tuple[bytes, int, bool, object]:
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        section = elf.get_section_by_name(".eh_frame")
        sframe = elf.get_section_by_name(".sframe")
        reader = SFrameReader(sframe.data(), sframe["sh_addr"]) if sframe else None
        return section.data(), section["sh_addr"], not elf.little_endian, reader


@needs_fixtures
@pytest.mark.parametrize("arch", ["x86_64", "aarch64", "s390x"])
def test_every_sframe_function_has_an_eh_frame_fde(arch: str) -> None:
    data, address, big_endian, reader = eh_frame(FIXTURES / "2.46" / arch / "O2" / "prog")
    fdes, errors = parse_eh_frame(data, address, big_endian=big_endian)
    assert not errors
    covered = {(fde.pc_begin, fde.pc_range) for fde in fdes}
    assert isinstance(reader, SFrameReader)
    functions = [(entry.start, entry.size) for entry in reader.fdes()]
    # Each SFrame function is one .eh_frame FDE, or (ld's PLT FDEs) lies inside one.
    exact = [f for f in functions if f in covered]
    assert len(exact) >= len(functions) - 3
    for start, size in functions:
        assert any(b <= start and start + size <= b + r for b, r in covered), hex(start)
    for fde in fdes:
        fde_instructions(data, fde, big_endian)
        cie_instructions(data, fde.cie, big_endian)


def test_x86_64_instructions_decode_in_bytes() -> None:
    # def_cfa rsp+8; offset r16 (RA) at cfa-8; advance 1; def_cfa_offset 16; GNU_args_size 0
    raw = bytes([0x0C, 0x07, 0x08, 0x90, 0x01, 0x41, 0x0E, 0x10, 0x2E, 0x00])
    out = decode_instructions(raw, 0, len(raw), code_align=1, data_align=-8, big_endian=False)
    assert [(i.op, i.a, i.b) for i in out] == [
        (DW_CFA_def_cfa, 7, 8), (DW_CFA_offset, 16, -8), (DW_CFA_advance_loc, 1, 0),
        (DW_CFA_def_cfa_offset, 16, 0), (DW_CFA_GNU_args_size, 0, 0)]


def test_unknown_and_truncated_instructions_raise() -> None:
    with pytest.raises(DecodeError):
        decode_instructions(bytes([0x3F]), 0, 1, code_align=1, data_align=-8, big_endian=False)
    with pytest.raises(DecodeError):
        decode_instructions(bytes([0x0C, 0x87]), 0, 2, code_align=1, data_align=-8,
                            big_endian=False)


def test_system_libc_parses_without_errors() -> None:
    libc = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.skip("no x86-64 libc here")
    data, address, big_endian, _ = eh_frame(libc)
    fdes, errors = parse_eh_frame(data, address, big_endian=big_endian)
    assert not errors and len(fdes) > 1000
    for fde in fdes:
        fde_instructions(data, fde, big_endian)


def test_eh_frame_hdr_index_finds_every_function() -> None:
    from pysframe.cfi.eh_frame import EhFrameIndex
    from pysframe.elf import ElfImage

    path = FIXTURES / "2.46" / "x86_64" / "O2" / "prog"
    if not path.exists():
        pytest.skip("fixtures absent")
    image = ElfImage(str(path))
    eh = image.section(".eh_frame")
    hdr = image.section(".eh_frame_hdr")
    assert eh is not None and hdr is not None
    index = EhFrameIndex(eh[0], eh[1], hdr[0], hdr[1])
    fdes, _ = parse_eh_frame(eh[0], eh[1])
    assert len(index) == len(fdes)
    for fde in fdes:
        found = index.fde_for(fde.pc_begin + fde.pc_range - 1)
        assert found is not None and (found.pc_begin, found.pc_range) == (fde.pc_begin,
                                                                           fde.pc_range)
    assert index.fde_for(0) is None
