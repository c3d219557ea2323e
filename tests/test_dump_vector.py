"""The numpy dumper prints exactly what the line-by-line dumper prints."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from tests.support.strategies import sections

from pysframe.format import (
    ABI,
    FDE,
    FRE,
    BaseReg,
    FDEType,
    PCType,
    Section,
    SFrameError,
    SFrameReader,
    dump_lines,
    encode,
    style_for,
)
from pysframe.format.dump_vector import dump_vectorized


def both(data: bytes, address: int) -> tuple[bytes | None, bytes]:
    reader = SFrameReader(data, address)
    style = style_for(reader.version, reader.header.flags)
    slow = ("\n".join(dump_lines(reader, ".sframe", style)) + "\n").encode()
    return dump_vectorized(reader, ".sframe", style), slow


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sections())
def test_vector_dump_equals_line_dump(section: Section) -> None:
    data = encode(section)
    fast, slow = both(data, section.address)
    if section.fdes:
        assert fast == slow


def test_every_kind_of_row_at_once() -> None:
    fdes = [
        FDE(0x1000, 16, [FRE(0, (16,)), FRE(6, (24,))]),
        FDE(0x1010, 64, [FRE(0, (8,)), FRE(11, (16,))], pc_type=PCType.MASK, rep_size=16),
        FDE(0x1050, 0x300, [FRE(0, (8,)), FRE(0x120, (0x11008,)), FRE(0x2FF, ())]),
        FDE(0x1400, 0x12000, [FRE(0, (0x51, 0), BaseReg.FP), FRE(0x10000, (0x33, -8, 0, 0x33, 0))],
            fde_type=FDEType.FLEX),
        FDE(0x14000, 9, [], signal=True),
        FDE(-0x100, 0x20, [FRE(0, (8,)), FRE(0x10, (16, -16))]),  # prints as 0xffffffffffffff00
    ]
    for version, abi in ((3, ABI.AMD64_ENDIAN_LITTLE), (3, ABI.S390X_ENDIAN_BIG)):
        section = Section(version=version, abi=abi, fdes=[*fdes],
                          cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0x800)
        fast, slow = both(encode(section), 0x800)
        assert fast == slow and b'attr = "SF"' not in slow and b"RA undefined" in slow
    aarch = Section(version=2, abi=ABI.AARCH64_ENDIAN_BIG, fdes=[
        FDE(0x100, 12, [FRE(0, (0,)), FRE(4, (0,), mangled_ra=True),
                        FRE(8, (16, -8, -16), mangled_ra=True)], pauth_key_b=True)])
    fast, slow = both(encode(aarch), 0)
    assert fast == slow and b"pauth = B key" in slow and b"c-8[s]" in slow


def test_irregular_sections_go_to_the_checked_path() -> None:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8,
                      fdes=[FDE(0x1000, 16, [FRE(0, (8,)), FRE(1, (16,))])])
    data = bytearray(encode(section))
    struct.pack_into("<I", data, 16, len(data) - 28 - 16 - 3)  # fre_len cuts the last FRE
    reader = SFrameReader(bytes(data[:-3]), 0)
    assert dump_vectorized(reader, ".sframe", style_for(3)) is None
    with pytest.raises(SFrameError):
        dump_lines(reader)
