"""The textual dump of an SFrame section, exactly as GNU objdump/readelf print it.

The text starts at the ``Contents of the SFrame section <name>:`` line; the
ELF-specific lines before it are the command's business. Different binutils
releases print slightly different text; :class:`DumpStyle` captures the
differences and :func:`style_for` picks the style of the release that produced
a section (objdump of that release is the reference for its files).

Rows are formatted through a cache keyed by the FRE's raw info byte and data
words: real sections repeat a few hundred distinct rows many times, so most
rows cost one dict lookup and one ``%`` format.
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
    FRE_START_SIZE,
    INFO_SIGNAL_BIT,
    S390X_CFA_OFFSET_ADJUSTMENT,
    S390X_CFA_OFFSET_ALIGNMENT,
    VERSION_1,
    VERSION_2,
    VERSION_3,
    WORD_SIZE_OF_CODE,
    FDEType,
    FREType,
    PCType,
)
from .decode import FDEEntry, SFrameReader
from .errors import CorruptError
from .model import FRE

_U64 = (1 << 64) - 1


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


class _RowFormatter:
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


def dump_lines(reader: SFrameReader, name: str = ".sframe",
               style: DumpStyle | None = None) -> list[str]:
    """The dump as a list of lines (no newlines), from the ``Contents of ...`` line on."""
    h = reader.header
    if style is None:
        style = style_for(h.version, h.flags)
    check_dumpable(reader, style)
    reader.check_fre_total()
    lines = header_lines(reader, name, style)
    rows = _RowWriter(reader, style)
    b_key_abi = h.abi in (ABI.AARCH64_ENDIAN_BIG, ABI.AARCH64_ENDIAN_LITTLE)
    for entry in reader.fdes():
        if entry.index:
            lines.append("")
        lines.append(_fde_line(entry, style, b_key_abi))
        rows.append_rows(lines, entry)
    return lines


def _fde_line(entry: FDEEntry, style: DumpStyle, b_key_abi: bool) -> str:
    return _fde_line_parts(entry.index, entry.start, entry.size, entry.info, entry.info2, style,
                           b_key_abi)


def _fde_line_parts(index: int, start: int, size: int, info: int, info2: int, style: DumpStyle,
                    b_key_abi: bool) -> str:
    text = f"    func idx [{index}]: pc = {start & _U64:#x}, size = {size} bytes"
    if style.v3:
        attr = ("S" if info & INFO_SIGNAL_BIT else "") + ("F" if info2 & 0x1F == FDEType.FLEX else "")
        if attr:
            text += f', attr = "{attr}"'
    if b_key_abi and info & 0x20:
        text += ", pauth = B key"
    return text


#: Bytes of data words that follow an FRE info byte (-1: invalid size code).
_WORDS_LENGTH = [((info >> 1) & 0xF) * WORD_SIZE_OF_CODE[(info >> 5) & 3]
                 if (info >> 5) & 3 != 3 else -1 for info in range(256)]

_HEADER_INC = "    STARTPC         CFA       FP        RA           "
_HEADER_MASK = "    STARTPC[m]      CFA       FP        RA           "


class _RowWriter:
    """Appends the FRE rows of functions, straight from the section bytes.

    The hot loop reads each FRE's start and info byte, slices out the info
    byte and data words as the key of a cache of column texts, and formats
    one line. Anything irregular (a row running past the FRE sub-section,
    an invalid size code) is handed to the checked reader, which raises the
    proper error.
    """

    def __init__(self, reader: SFrameReader, style: DumpStyle) -> None:
        self.reader = reader
        self.formatter = _RowFormatter(reader, style)
        self.data = bytes(reader.buffer)
        self.big_endian = reader.header.big_endian
        self.caches: dict[bool, dict[bytes, str]] = {False: {}, True: {}}

    def _columns(self, entry: FDEEntry, flex: bool, at: int) -> str:
        fre, _ = self.reader.read_fre(entry, at)
        return self.formatter.columns(fre, flex)

    def append_rows(self, lines: list[str], entry: FDEEntry) -> None:
        mask = entry.pc_type == PCType.MASK
        lines.append(_HEADER_MASK if mask else _HEADER_INC)
        if not entry.num_fres:
            return
        flex = entry.fde_type == FDEType.FLEX
        base = 0 if mask else entry.start
        cache = self.caches[flex]
        data = self.data
        words_length = _WORDS_LENGTH
        end_limit = self.reader.header.fres_end
        start_size = FRE_START_SIZE[FREType(entry.fre_type)]
        big = self.big_endian
        append = lines.append
        pos = entry.fres_offset
        for _ in range(entry.num_fres):
            info_at = pos + start_size
            if info_at >= end_limit:
                self.reader.read_fre(entry, pos)  # raises the bounds error
            if start_size == 1:
                start = data[pos]
            elif big:
                start = int.from_bytes(data[pos:info_at], "big")
            else:
                start = int.from_bytes(data[pos:info_at], "little")
            length = words_length[data[info_at]]
            end = info_at + 1 + length
            if length < 0 or end > end_limit:
                self.reader.read_fre(entry, pos)  # raises the precise error
            key = data[info_at:end]
            text = cache.get(key)
            if text is None:
                text = self._columns(entry, flex, pos)
                cache[key] = text
            append("    %016x  %s" % ((base + start) & _U64, text))
            pos = end


#: From this many FREs on, the numpy dumper is faster than the line loop (numpy's import
#: alone costs about 0.1 s).
VECTOR_THRESHOLD = 20000


def dump_text(reader: SFrameReader, name: str = ".sframe", style: DumpStyle | None = None) -> str:
    """The dump as one string ending in a newline."""
    return dump_bytes(reader, name, style).decode("ascii")


def dump_bytes(reader: SFrameReader, name: str = ".sframe",
               style: DumpStyle | None = None) -> bytes:
    """The dump as ASCII bytes: built with numpy for regular sections (see
    :mod:`.dump_vector`), line by line otherwise (which also raises the errors)."""
    if style is None:
        style = style_for(reader.header.version, reader.header.flags)
    check_dumpable(reader, style)
    if reader.header.num_fres >= VECTOR_THRESHOLD:
        from .dump_vector import dump_vectorized

        fast = dump_vectorized(reader, name, style)
        if fast is not None:
            return fast
    return ("\n".join(dump_lines(reader, name, style)) + "\n").encode("ascii")


__all__ = ["STYLE_2_40", "STYLE_2_44", "STYLE_2_46", "DumpStyle", "dump_bytes", "dump_lines",
           "dump_text",
           "style_for"]
