"""Unit tests of the format library per ABI and per version: encode, decode, lookup."""

from __future__ import annotations

import struct

import pytest

from pysframe.format import (
    ABI,
    FDE,
    FRE,
    BadMagicError,
    BaseReg,
    CorruptError,
    EncodeError,
    FDEType,
    FREType,
    PCType,
    RuleKind,
    Section,
    SFrameLookup,
    SFrameReader,
    TruncatedError,
    UnsupportedVersionError,
    convert,
    decode,
    dump_text,
    encode,
    relocate,
)
from pysframe.format.constants import F_FDE_FUNC_START_PCREL, F_FDE_SORTED, F_FRAME_POINTER

SP, FP = BaseReg.SP, BaseReg.FP


def amd64(version: int = 3, address: int = 0x1000) -> Section:
    flags = F_FDE_FUNC_START_PCREL if version > 1 else 0
    return Section(version=version, abi=ABI.AMD64_ENDIAN_LITTLE, flags=flags,
                   cfa_fixed_ra_offset=-8, address=address, fdes=[
                       FDE(0x2000, 25, [FRE(0, (8,)), FRE(1, (16, -16)), FRE(4, (16, -16), FP),
                                        FRE(24, (8, -16))]),
                       FDE(0x2020, 0x300, [FRE(0, (8,)), FRE(0x120, (0x11008,))]),
                   ])


def test_worked_example_bytes_match_the_spec() -> None:
    """The 64-byte section of spec §1.16 (gas 2.46 output), byte for byte."""
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, flags=F_FDE_FUNC_START_PCREL,
                      cfa_fixed_ra_offset=-8, address=0,
                      fdes=[FDE(0x1C, 25, [FRE(0, (8,)), FRE(1, (16, -16)),
                                           FRE(4, (16, -16), FP), FRE(0x18, (8, -16))])])
    expected = bytes.fromhex(
        "e2de0304" "0300f800" "01000000" "04000000" "14000000" "00000000" "10000000"
        "0000000000000000" "19000000" "00000000" "0400000000"
        "000308" "010510f0" "040410f0" "180508f0")
    assert encode(section) == expected


@pytest.mark.parametrize("version", [1, 2, 3])
def test_amd64_round_trip_each_version(version: int) -> None:
    section = amd64(version)
    data = encode(section)
    back = decode(data, section.address)
    assert back.version == version
    assert [f.start for f in back.fdes] == [0x2000, 0x2020]
    assert back.fdes[1].fre_type == FREType.ADDR2
    assert back.fdes[1].fres[1].word_size == 4
    assert encode(back) == data


@pytest.mark.parametrize("abi", list(ABI))
@pytest.mark.parametrize("version", [2, 3])
def test_every_abi_round_trips_in_its_byte_order(abi: ABI, version: int) -> None:
    words = (16, -8, -16) if not abi.is_amd64 else (16, -16)
    section = Section(version=version, abi=abi, flags=F_FDE_FUNC_START_PCREL,
                      cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0x10000,
                      fdes=[FDE(0x400000, 0x20, [FRE(0, (0,)), FRE(4, words, mangled_ra=abi.is_aarch64)],
                                pauth_key_b=abi.is_aarch64)])
    data = encode(section)
    assert data[:2] == (b"\xde\xe2" if abi.big_endian else b"\xe2\xde")
    back = decode(data, 0x10000)
    assert back.fdes[0].fres[1].words == words
    assert back.fdes[0].pauth_key_b == abi.is_aarch64
    assert encode(back) == data


def test_pcrel_and_section_relative_starts() -> None:
    section = amd64(2, address=0x5000)
    pcrel = encode(section)
    section.flags = 0
    absolute = encode(section)
    # FDE 0's start field: PCREL is relative to the field (at 0x1c), else to the section.
    assert struct.unpack_from("<i", pcrel, 28)[0] == 0x2000 - (0x5000 + 28)
    assert struct.unpack_from("<i", absolute, 28)[0] == 0x2000 - 0x5000
    assert decode(absolute, 0x5000).fdes[0].start == 0x2000


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("pcrel", [True, False])
def test_relocate_moves_the_section_not_the_code(version: int, pcrel: bool) -> None:
    """A moved section describes the same functions: its bytes are those encode gives at
    the new address (only the start fields differ from the old ones)."""
    section = amd64(version, address=0x5000)
    if not pcrel:
        section.flags = 0
    data = encode(section)
    moved = relocate(data, 0x5000, 0x9000)
    assert [fde.start for fde in decode(moved, 0x9000).fdes] == [0x2000, 0x2020]
    section.address = 0x9000
    assert moved == encode(section)
    if version < 3:
        with pytest.raises(EncodeError, match="32-bit"):
            relocate(data, 0x5000, 0x5000 + (1 << 31))
    else:
        assert decode(relocate(data, 0x5000, 1 << 46), 1 << 46).fdes[0].start == 0x2000


@pytest.mark.parametrize(("abi", "version"), [
    (abi, version) for abi in ABI for version in (1, 2, 3) if version > 1 or abi.is_amd64])
@pytest.mark.parametrize("pcrel", [True, False])
def test_fde_ranges_are_the_fdes_ranges(abi: ABI, version: int, pcrel: bool) -> None:
    """The FDE ranges read from the start and size fields alone (a first run's merge of a
    file's own table) are those of the FDEs decoded whole, in each version, byte order
    and start encoding, the FDEs stored out of order too."""
    fdes = [FDE(0x400000 + 0x40 * k, 0x20 + k, [FRE(0, (8,) if abi.is_amd64 else (0,))])
            for k in (3, 0, 2, 1)]
    section = Section(version=version, abi=abi, flags=F_FDE_FUNC_START_PCREL if pcrel else 0,
                      cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0, address=0x10000,
                      fdes=fdes)
    reader = SFrameReader(encode(section), 0x10000)
    assert reader.fde_ranges() == [(e.start, e.start + e.size) for e in reader.fdes()]
    assert [start for start, _ in reader.fde_ranges()] == [fde.start for fde in fdes]


def test_gas_word_size_choice_signed_offsets_unsigned_controls() -> None:
    fde = FDE(0, 0x10, [FRE(0, (127,)), FRE(1, (128,)), FRE(2, (-32769,))])
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[fde])
    sizes = [fre.word_size for fre in decode(encode(section)).fdes[0].fres]
    assert sizes == [1, 2, 4]
    flex = FDE(0, 0x10, [FRE(0, (16 << 3 | 1, 8), FP)], fde_type=FDEType.FLEX)  # ctl 0x81 fits u8
    section.fdes = [flex]
    decoded = decode(encode(section)).fdes[0].fres[0]
    assert decoded.word_size == 1 and decoded.words == (0x81, 8)


def test_fre_type_follows_function_size() -> None:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[
        FDE(0, 0xFF, [FRE(0, (8,))]), FDE(0x100, 0x100, [FRE(0, (8,))]),
        FDE(0x1000, 0x10000, [FRE(0, (8,))])])
    assert [f.fre_type for f in decode(encode(section)).fdes] == [
        FREType.ADDR1, FREType.ADDR2, FREType.ADDR4]


def test_lookup_default_rules_amd64() -> None:
    reader = SFrameReader(encode(amd64()), 0x1000)
    lookup = SFrameLookup(reader)
    row = lookup.find_fre(0x2005)
    assert row is not None and row.fre_index == 2
    assert (row.cfa.kind, row.cfa.regnum, row.cfa.offset) == (RuleKind.REGISTER, 6, 16)
    assert (row.ra.kind, row.ra.offset, row.ra.deref) == (RuleKind.CFA, -8, True)
    assert (row.fp.kind, row.fp.offset, row.fp.deref) == (RuleKind.CFA, -16, True)
    assert lookup.find_fre(0x2019) is None  # gap between functions
    assert lookup.find_fre(0x1FFF) is None
    assert lookup.find_fde(0x2021) is not None


def test_lookup_correct_when_index_not_sorted() -> None:
    section = amd64()
    section.fdes.reverse()
    reader = SFrameReader(encode(section), 0x1000)
    lookup = SFrameLookup(reader)
    assert not lookup.sorted_verified
    row = lookup.find_fre(0x2021)
    assert row is not None and row.func_start == 0x2020


def test_lookup_pcmask_uses_rep_size() -> None:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[
        FDE(0x1030, 0x40, [FRE(0, (8,)), FRE(11, (16,))], pc_type=PCType.MASK, rep_size=16)])
    reader = SFrameReader(encode(section))
    lookup = SFrameLookup(reader)
    assert lookup.find_fre(0x1030 + 16 * 2 + 12).cfa.offset == 16  # type: ignore[union-attr]
    assert lookup.find_fre(0x1030 + 16 * 3 + 3).cfa.offset == 8  # type: ignore[union-attr]


def test_lookup_aarch64_ra_tracked_and_mangled() -> None:
    section = Section(version=3, abi=ABI.AARCH64_ENDIAN_BIG, fdes=[
        FDE(0x100, 12, [FRE(0, (0,)), FRE(4, (0,), mangled_ra=True),
                        FRE(8, (16, -8, -16), mangled_ra=True)], pauth_key_b=True)])
    reader = SFrameReader(encode(section))
    lookup = SFrameLookup(reader)
    top = lookup.find_fre(0x100)
    assert top is not None and top.ra.kind == RuleKind.RETAIN and top.cfa.regnum == 31
    row = lookup.find_fre(0x109)
    assert row is not None and row.ra_mangled and row.pauth_key_b
    assert (row.ra.offset, row.fp.offset) == (-8, -16)


def test_lookup_s390x_encodings() -> None:
    # CFA word (offset - 160) / 8; RA padding 0 means "not saved"; V2 LSB-tagged registers.
    section = Section(version=2, abi=ABI.S390X_ENDIAN_BIG, fdes=[
        FDE(0x100, 0x40, [FRE(0, (0,)), FRE(6, (21, 0, -72)), FRE(10, (0, (24 << 1) | 1))])])
    reader = SFrameReader(encode(section))
    lookup = SFrameLookup(reader)
    row = lookup.find_fre(0x107)
    assert row is not None and row.cfa.offset == 21 * 8 + 160
    assert row.ra.kind == RuleKind.RETAIN and row.fp.offset == -72
    row = lookup.find_fre(0x10B)
    assert row is not None and row.ra.kind == RuleKind.REGISTER and row.ra.regnum == 24
    text = dump_text(reader)
    assert "sp+328    c-72      U" in text and "sp+160    u         r24" in text
    # V2 -> V3 turns the register word into a flexible FDE.
    v3 = convert(decode(encode(section)), 3)
    assert v3.fdes[0].fde_type == FDEType.FLEX
    row3 = SFrameLookup(SFrameReader(encode(v3))).find_fre(0x10B)
    assert row3 is not None and row3.ra.kind == RuleKind.REGISTER and row3.ra.regnum == 24


def test_lookup_flex_drap_and_outermost() -> None:
    section = Section(version=3, abi=ABI.AMD64_ENDIAN_LITTLE, cfa_fixed_ra_offset=-8, fdes=[
        FDE(0x0, 0x20, [FRE(0, (0x51, 0), FP), FRE(8, (0x33, -8, 0, 0x33, 0), FP), FRE(16, ())],
            fde_type=FDEType.FLEX)])
    reader = SFrameReader(encode(section))
    lookup = SFrameLookup(reader)
    row = lookup.find_fre(9)
    assert row is not None and row.flex
    assert (row.cfa.regnum, row.cfa.offset, row.cfa.deref) == (6, -8, True)
    assert (row.fp.kind, row.fp.regnum, row.fp.deref) == (RuleKind.REGISTER, 6, True)
    assert row.ra.offset == -8  # padding: the fixed RA offset applies
    assert lookup.find_fre(17).outermost  # type: ignore[union-attr]


def test_convert_v3_to_v2_refuses_flex_and_signal() -> None:
    section = amd64()
    section.fdes.append(FDE(0x3000, 4, [FRE(0, (0x39, 8))], fde_type=FDEType.FLEX))
    with pytest.raises(EncodeError, match="flexible"):
        convert(section, 2)
    section.fdes[-1] = FDE(0x3000, 4, [], signal=True)
    with pytest.raises(EncodeError, match="signal"):
        convert(section, 2)
    section.fdes.pop()
    v2 = convert(section, 2)
    assert [f.start for f in decode(encode(v2), 0x1000).fdes] == [0x2000, 0x2020]


def test_v3_forbids_frame_pointer_flag_and_v1_forbids_ra_undefined() -> None:
    section = amd64()
    section.flags |= F_FRAME_POINTER
    with pytest.raises(EncodeError):
        encode(section)
    v1 = amd64(1)
    v1.fdes[0].fres.append(FRE(24, ()))
    with pytest.raises(EncodeError):
        encode(v1)


def test_sort_fdes_keeps_fre_order_like_ld() -> None:
    section = amd64()
    section.fdes.reverse()
    section.flags = F_FDE_FUNC_START_PCREL
    data_unsorted = encode(section)
    section.sort_fdes()
    assert section.flags & F_FDE_SORTED
    data = encode(section)
    reader = SFrameReader(data, 0x1000)
    assert SFrameLookup(reader).sorted_verified
    # FRE data stays in the pre-sort order: FDE 0 (0x2000) now points past FDE 1's block.
    assert reader.fde(0).fre_off > reader.fde(1).fre_off
    assert len(data) == len(data_unsorted)


@pytest.mark.parametrize("data, error", [
    (b"", TruncatedError),
    (b"\x00\x00\x03\x00" + bytes(24), BadMagicError),
    (b"\xe2\xde\x09\x00" + bytes(24), UnsupportedVersionError),
    (b"\xe2\xde\x03\x00" + bytes(10), TruncatedError),
])
def test_bad_headers(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        SFrameReader(data)


def test_huge_counts_fail_fast_without_allocating() -> None:
    data = bytearray(encode(amd64()))
    struct.pack_into("<I", data, 8, 2**32 - 1)  # num_fdes
    with pytest.raises(TruncatedError) as info:
        SFrameReader(bytes(data))
    assert info.value.offset == 8
    data = bytearray(encode(amd64()))
    # attribute record of FDE 0 claims 65535 FREs
    reader = SFrameReader(bytes(data))
    attr = reader.header.fres_start + reader.fde(0).fre_off
    struct.pack_into("<H", data, attr, 0xFFFF)
    with pytest.raises(TruncatedError):
        SFrameReader(bytes(data)).fde(0)


def test_corrupt_fre_rows_detected_on_lookup() -> None:
    section = amd64()
    section.fdes[0].fres[1].start = 0  # not ascending
    reader = SFrameReader(encode(section), 0x1000)
    with pytest.raises(CorruptError):
        SFrameLookup(reader).find_fre(0x2000)


def test_old_dumpers_quirks() -> None:
    """What objdump 2.40 and 2.44 print differently (checked against those releases)."""
    from pysframe.format import STYLE_2_40, STYLE_2_44

    v2 = Section(version=2, abi=ABI.AARCH64_ENDIAN_LITTLE, flags=F_FDE_SORTED | F_FRAME_POINTER,
                 fdes=[FDE(0x100, 16, [FRE(0, (16, 0, -16)), FRE(4, ())])])
    reader = SFrameReader(encode(v2), 0)
    text_244 = dump_text(reader, style=STYLE_2_44)
    assert "    Flags: SFRAME_F_FRAME_POINTER\n" in text_244  # SORTED hidden: their bug
    assert "sp+16     c-16      c+0" in text_244  # no "U" before 2.45
    assert "sp+-1     u         u" in text_244  # an FRE without words
    v1 = Section(version=1, abi=ABI.AMD64_ENDIAN_LITTLE, flags=0, cfa_fixed_ra_offset=-8,
                 cfa_fixed_fp_offset=-16, fdes=[FDE(0x100, 16, [FRE(0, (8,))])])
    text_240 = dump_text(SFrameReader(encode(v1), 0), style=STYLE_2_40)
    assert "fixed" not in text_240 and "sp+8      u         u   " in text_240


def test_dump_refuses_flags_objdump_refuses() -> None:
    section = amd64()
    data = bytearray(encode(section))
    data[3] |= 0x02  # FRAME_POINTER in V3
    with pytest.raises(CorruptError):
        dump_text(SFrameReader(bytes(data), 0x1000))


def test_facade_exports_every_public_name_lazily() -> None:
    """``pysframe.format`` is the API: every name of ``__all__`` resolves, and importing
    the package loads neither numpy (the vector dumper) nor pyelftools."""
    import subprocess
    import sys

    code = ("import sys, pysframe.format as f\n"
            "print(sorted(m for m in ('numpy', 'elftools') if m in sys.modules))\n"
            "missing = [n for n in f.__all__ if getattr(f, n, None) is None]\n"
            "print(missing, callable(f.validate), callable(f.decode), callable(f.encode))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.splitlines() == ["[]", "[] True True True"]
