"""The textual dump of an SFrame section, exactly as GNU objdump/readelf print it.

The text starts at the ``Contents of the SFrame section <name>:`` line; the
ELF-specific lines before it are the command's business. Different binutils
releases print slightly different text; :class:`~.dump_style.DumpStyle` captures
the differences and :func:`~.dump_style.style_for` picks the style of the release
that produced a section (objdump of that release is the reference for its files).

Rows are formatted through a cache keyed by the FRE's raw info byte and data
words: real sections repeat a few hundred distinct rows many times, so most
rows cost one dict lookup and one ``%`` format.
"""

from __future__ import annotations

from .constants import (
    ABI,
    FRE_START_SIZE,
    INFO_SIGNAL_BIT,
    WORD_SIZE_OF_CODE,
    FDEType,
    FREType,
    PCType,
)
from .decode import FDEEntry, SFrameReader
from .dump_style import DumpStyle, RowFormatter, check_dumpable, header_lines, style_for

_U64 = (1 << 64) - 1


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
        self.formatter = RowFormatter(reader, style)
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


__all__ = ["VECTOR_THRESHOLD", "dump_bytes", "dump_lines", "dump_text"]
