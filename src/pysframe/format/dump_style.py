"""What a dump looks like, shared by the three dumpers: the line-by-line text dump
(:mod:`.dump`), the numpy one (:mod:`.dump_vector`) and the JSON one (:mod:`.jsondump`).

:class:`DumpStyle` captures what different binutils releases print differently
and :func:`style_for` picks the release that wrote a section. The header lines
and the CFA/FP/RA columns of a row are formatted here, once for all dumpers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .constants import (
    ABI,
    DWARF_REGS,
    F_FDE_FUNC_START_PCREL,
    F_FDE_SORTED,
    F_FRAME_POINTER,
    FLAGS_MASK,
    FLEX_DEREF_P,
    FLEX_REG_P,
    FLEX_REGNUM_SHIFT,
    S390X_CFA_OFFSET_ADJUSTMENT,
    S390X_CFA_OFFSET_ALIGNMENT,
    VERSION_1,
    VERSION_2,
    VERSION_3,
)
from .decode import SFrameReader
from .errors import CorruptError
from .model import FRE


@dataclass(slots=True, frozen=True)
class DumpStyle:
    """What one binutils release's dumper prints differently."""

    name: str
    #: Print "CFA fixed FP/RA offset" header lines and the "f" RA column (2.41+).
    fixed_offsets: bool = True
    #: Print "RA undefined" rows for FREs without data words (2.45+).
    ra_undefined_rows: bool = True
    #: V3 attribute / flex columns (2.46+).
    v3: bool = True
    #: An RA word of 0 prints as "U" (s390x padding; 2.45+), else as "c+0".
    ra_padding_u: bool = True
    #: A fixed FP offset prints as "c<offset>" (2.41+), else as "u".
    fixed_fp_column: bool = True
    #: Flags on one line, FRAME_POINTER hiding SORTED (a bug of 2.40-2.44's dumper).
    flags_one_line: bool = False


STYLE_2_40 = DumpStyle("2.40", fixed_offsets=False, ra_undefined_rows=False, v3=False,
                       ra_padding_u=False, fixed_fp_column=False, flags_one_line=True)
STYLE_2_44 = DumpStyle("2.44", fixed_offsets=True, ra_undefined_rows=False, v3=False,
                       ra_padding_u=False, flags_one_line=True)
STYLE_2_46 = DumpStyle("2.46")


def style_for(version: int, flags: int = 0) -> DumpStyle:
    """The style of the binutils release that wrote sections of this version: 2.40 for V1,
    2.44 for V2 without SFRAME_F_FDE_FUNC_START_PCREL (2.41-2.44), else 2.46."""
    if version == VERSION_1:
        return STYLE_2_40
    if version == VERSION_2 and not flags & F_FDE_FUNC_START_PCREL:
        return STYLE_2_44
    return STYLE_2_46


def check_dumpable(reader: SFrameReader, style: DumpStyle) -> None:
    """objdump refuses ("Buffer does not contain SFrame data") flags its release does not know."""
    h = reader.header
    legal = (F_FDE_SORTED | F_FRAME_POINTER) if style.flags_one_line else FLAGS_MASK[h.version]
    if h.flags & ~legal:
        raise CorruptError(f"flags {h.flags:#x} are not valid for SFrame version {h.version}", 3)


def _flags_lines(version: int, flags: int, style: DumpStyle) -> list[str]:
    if not flags:
        return ["    Flags: NONE"]
    if style.flags_one_line:
        name = "SFRAME_F_FRAME_POINTER" if flags & F_FRAME_POINTER else "SFRAME_F_FDE_SORTED"
        return [f"    Flags: {name}"]
    names = []
    remaining = flags
    for bit, name in ((F_FDE_SORTED, "SFRAME_F_FDE_SORTED"),
                      (F_FRAME_POINTER, "SFRAME_F_FRAME_POINTER"),
                      (F_FDE_FUNC_START_PCREL, "SFRAME_F_FDE_FUNC_START_PCREL")):
        if bit == F_FRAME_POINTER and version == VERSION_3:
            continue
        if flags & bit:
            names.append(name)
            remaining &= ~bit
    items = names + ([str(remaining)] if remaining else [])
    lines = []
    for position, item in enumerate(items):
        prefix = "    Flags: " if position == 0 else " " * 11
        comma = "," if position < len(items) - 1 else ""
        lines.append(prefix + item + comma)
    return lines


class RowFormatter:
    """Formats the CFA/FP/RA columns of FREs for one section (with a cache)."""

    def __init__(self, reader: SFrameReader, style: DumpStyle) -> None:
        h = reader.header
        self.version = h.version
        self.abi = h.abi
        self.style = style
        self.fixed_fp = h.cfa_fixed_fp_offset
        self.fixed_ra = h.cfa_fixed_ra_offset
        self.s390x = h.abi == ABI.S390X_ENDIAN_BIG
        regs = DWARF_REGS.get(ABI(h.abi)) if h.abi in ABI._value2member_map_ else None
        self.sp_reg = regs.sp if regs else -1
        self.fp_reg = regs.fp if regs else -1
        self.cache: dict[tuple[object, ...], str] = {}

    def columns(self, fre: FRE, flex: bool) -> str:
        key = (fre.base_reg, fre.words, fre.mangled_ra, flex)
        text = self.cache.get(key)
        if text is None:
            text = self._format(fre, flex)
            self.cache[key] = text
        return text

    def _cfa_offset(self, word: int) -> int:
        if self.s390x:
            return word * S390X_CFA_OFFSET_ALIGNMENT - S390X_CFA_OFFSET_ADJUSTMENT
        return word

    def _format(self, fre: FRE, flex: bool) -> str:
        words = fre.words
        if not words and self.style.ra_undefined_rows:
            return "RA undefined"
        suffix = "[s]" if fre.mangled_ra else "   "
        if flex:
            cfa, fp, ra = self._flex_columns(words)
        else:
            cfa, fp, ra = self._default_columns(fre)
        return "%-10s%-10s%-13s" % (cfa, fp, ra + suffix)

    def _default_columns(self, fre: FRE) -> tuple[str, str, str]:
        words = fre.words
        base = "sp" if fre.base_reg else "fp"
        # Before 2.45 an FRE without words printed libsframe's error value as the offset.
        cfa = f"{base}+{self._cfa_offset(words[0])}" if words else f"{base}+-1"
        v2_s390x = self.s390x and self.version == VERSION_2
        # RA
        next_word = 1
        if self.fixed_ra:
            ra = "f" if self.style.fixed_offsets else "u"
        elif len(words) > 1:
            next_word = 2
            word = words[1]
            if word == 0 and self.style.ra_padding_u:
                ra = "U"
            elif v2_s390x and word & 1:
                ra = f"r{word >> 1}"
            else:
                ra = f"c{word:+d}"
        else:
            ra = "u"
        # FP
        if self.fixed_fp:
            fp = f"c{self.fixed_fp:+d}" if self.style.fixed_fp_column else "u"
        elif len(words) > next_word:
            word = words[next_word]
            fp = f"r{word >> 1}" if v2_s390x and word & 1 else f"c{word:+d}"
        else:
            fp = "u"
        return cfa, fp, ra

    def _rule_text(self, control: int, offset: int, cfa: bool = False) -> str:
        if control & FLEX_REG_P:
            regnum = control >> FLEX_REGNUM_SHIFT
            if regnum == self.sp_reg:
                base = "sp"
            elif regnum == self.fp_reg:
                base = "fp"
            else:
                base = f"r{regnum}"
            if cfa:
                offset = self._cfa_offset(offset)
            text = f"{base}{offset:+d}"
            return f"({text})" if control & FLEX_DEREF_P else text
        return f"c{offset:+d}"

    def _flex_columns(self, words: tuple[int, ...]) -> tuple[str, str, str]:
        count = len(words)
        cfa = self._rule_text(words[0], words[1], cfa=True) if count >= 2 else "u"
        position = 2
        if count > position:
            ra_control = words[position]
            if ra_control == 0:
                ra = "U"
                position += 1
            else:
                ra = self._rule_text(ra_control, words[position + 1] if count > position + 1 else 0)
                position += 2
        else:
            ra = "f" if self.fixed_ra else "u"
        if count > position:
            fp = self._rule_text(words[position], words[position + 1] if count > position + 1 else 0)
        elif self.fixed_fp:
            fp = f"c{self.fixed_fp:+d}"
        else:
            fp = "u"
        return cfa, fp, ra


def header_lines(reader: SFrameReader, name: str, style: DumpStyle) -> list[str]:
    """The lines up to and including the blank line after ``Function Index :``."""
    h = reader.header
    lines = [f"Contents of the SFrame section {name}:", "  Header :", "",
             f"    Version: SFRAME_VERSION_{h.version}"]
    lines += _flags_lines(h.version, h.flags, style)
    if style.fixed_offsets:
        if h.cfa_fixed_fp_offset:
            lines.append(f"    CFA fixed FP offset: {h.cfa_fixed_fp_offset}")
        if h.cfa_fixed_ra_offset:
            lines.append(f"    CFA fixed RA offset: {h.cfa_fixed_ra_offset}")
    lines += [f"    Num FDEs: {h.num_fdes}", f"    Num FREs: {h.num_fres}", "",
              "  Function Index :", ""]
    return lines


__all__ = ["STYLE_2_40", "STYLE_2_44", "STYLE_2_46", "DumpStyle", "RowFormatter",
           "check_dumpable", "header_lines", "style_for"]
