"""The objdump-style dump built with numpy, for sections of any size.

Printing one line per FRE in a Python loop costs about a microsecond a line,
several times what objdump needs. Here every step works on whole arrays:
the FDE table is read with one structured ``frombuffer``; the FRE positions
are found one row index at a time across all functions at once (row k of
every function, then row k+1, ...); each distinct (info byte, data words) row
is formatted once by the ordinary formatter; and the output is assembled in
one byte array (hex addresses from a nibble table, texts scattered per
distinct row). Anything irregular (a row outside the FRE sub-section, an
invalid size code or FRE type, more FREs than the header counts, a huge
function) returns ``None`` and the caller uses the line-by-line dumper, which
reports the precise error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .constants import (
    ABI,
    F_FDE_FUNC_START_PCREL,
    INFO_SIGNAL_BIT,
    V3_ATTR_SIZE,
    VERSION_1,
    VERSION_3,
    WORD_SIZE_OF_CODE,
    BaseReg,
)
from .decode import SFrameReader, word_struct
from .model import FRE

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
U64A = npt.NDArray[np.uint64]

#: Bytes of data words after an FRE info byte (-1: size code 3, invalid).
_WORDS_LENGTH = np.array([((info >> 1) & 0xF) * WORD_SIZE_OF_CODE[(info >> 5) & 3]
                          if (info >> 5) & 3 != 3 else -1 for info in range(256)], dtype=np.int64)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_SHIFTS = np.arange(60, -1, -4, dtype=np.uint64)
#: Above this many FREs in one function the row-by-row vector loop is not worth it.
_MAX_ROWS_PER_FUNCTION = 20000

_HEADER_INC = b"    STARTPC         CFA       FP        RA           \n"
_HEADER_MASK = b"    STARTPC[m]      CFA       FP        RA           \n"


def _fde_table(reader: SFrameReader) -> dict[str, Any] | None:
    """Per-FDE arrays: start (uint64, wrapped like objdump), size, info, info2, num_fres,
    offset of the first FRE; ``None`` if an attribute record or count is out of bounds."""
    h = reader.header
    buf = np.frombuffer(reader.buffer, dtype=np.uint8)
    order = ">" if h.big_endian else "<"
    count = h.num_fdes
    area = reader.buffer[h.fdes_start:h.fdes_end]
    if h.version == VERSION_3:
        dtype = np.dtype({"names": ["start", "size", "fre_off"],
                          "formats": [order + "i8", order + "u4", order + "u4"],
                          "offsets": [0, 8, 12], "itemsize": 16})
    else:
        names = ["start", "size", "fre_off", "num_fres", "info"]
        formats = [order + "i4", order + "u4", order + "u4", order + "u4", "u1"]
        dtype = np.dtype({"names": names, "formats": formats, "offsets": [0, 4, 8, 12, 16],
                          "itemsize": 17 if h.version == VERSION_1 else 20})
    table = np.frombuffer(area, dtype=dtype, count=count)
    fre_off = table["fre_off"].astype(np.int64)
    if np.any(fre_off > h.fre_len):
        return None
    if h.version == VERSION_3:
        attr = h.fres_start + fre_off
        if np.any(attr + V3_ATTR_SIZE > h.fres_end):
            return None
        first, second = buf[attr].astype(np.int64), buf[attr + 1].astype(np.int64)
        num_fres = (first << 8 | second) if h.big_endian else (second << 8 | first)
        info = buf[attr + 2]
        info2 = buf[attr + 3]
        fres_offset = attr + V3_ATTR_SIZE
    else:
        num_fres = table["num_fres"].astype(np.int64)
        info = table["info"]
        info2 = np.zeros(count, dtype=np.uint8)
        fres_offset = h.fres_start + fre_off
    entry_offsets = h.fdes_start + np.arange(count, dtype=np.int64) * h.fde_size
    field = table["start"].astype(np.int64).astype(np.uint64)
    start = field + np.uint64(reader.address & ((1 << 64) - 1))
    if h.flags & F_FDE_FUNC_START_PCREL:
        start = start + entry_offsets.astype(np.uint64)
    return {"start": start, "size": table["size"].astype(np.int64), "info": info,
            "info2": info2, "num_fres": num_fres, "fres_offset": fres_offset}


def _fre_positions(buf: U8, fres_offset: I64, start_size: I64, num_fres: I64,
                   fres_end: int) -> I64 | None:
    """Section offset of every FRE (function-major order), or ``None`` if one is out of bounds."""
    total = int(num_fres.sum())
    positions = np.empty(total, dtype=np.int64)
    first_row = np.cumsum(num_fres) - num_fres
    current = fres_offset.copy()
    active = np.nonzero(num_fres > 0)[0]
    row = 0
    while active.size:
        at = current[active]
        info_at = at + start_size[active]
        if np.any(info_at >= fres_end):
            return None
        length = _WORDS_LENGTH[buf[info_at]]
        following = info_at + 1 + length
        if np.any(length < 0) or np.any(following > fres_end):
            return None
        positions[first_row[active] + row] = at
        current[active] = following
        row += 1
        active = active[num_fres[active] > row]
    return positions


def _read_unsigned(buf: U8, at: I64, width: I64, big_endian: bool) -> I64:
    """Unsigned integers of 1, 2 or 4 bytes (per element) at ``at``."""
    value = np.zeros(at.size, dtype=np.int64)
    for byte in range(4):
        use = width > byte
        if not np.any(use):
            break
        data = np.where(use, buf[np.minimum(at + byte, buf.size - 1)], 0).astype(np.int64)
        if big_endian:
            value = np.where(use, (value << 8) | data, value)
        else:
            value |= data << (8 * byte)
    return value


def dump_vectorized(reader: SFrameReader, name: str, style: Any) -> bytes | None:
    """The whole dump as bytes, or ``None`` when the section needs the careful path."""
    from .dump import _RowFormatter, header_lines

    h = reader.header
    if h.num_fdes == 0:
        return None
    table = _fde_table(reader)
    if table is None:
        return None
    info = table["info"]
    fre_type = (info & 0xF).astype(np.int64)
    num_fres = table["num_fres"]
    if np.any(fre_type > 2) or int(num_fres.sum()) > h.num_fres:
        return None
    if int(num_fres.max()) > _MAX_ROWS_PER_FUNCTION:
        return None
    buf = np.frombuffer(reader.buffer, dtype=np.uint8)
    start_size = np.array([1, 2, 4], dtype=np.int64)[fre_type]
    positions = _fre_positions(buf, table["fres_offset"], start_size, num_fres, h.fres_end)
    if positions is None:
        return None
    fde_of_row = np.repeat(np.arange(h.num_fdes), num_fres)
    row_start_size = start_size[fde_of_row]
    info_at = positions + row_start_size
    row_start = _read_unsigned(buf, positions, row_start_size, h.big_endian)
    mask_fde = (info & 0x10) != 0
    flex_fde = (table["info2"] & 0x1F) == 1
    address = np.where(mask_fde[fde_of_row], np.uint64(0), table["start"][fde_of_row])
    address = address + row_start.astype(np.uint64)

    # Distinct rows: (flex, info byte, data words), padded with zeros (the info byte fixes the length).
    words_length = _WORDS_LENGTH[buf[info_at]]
    width = int(words_length.max()) + 1 if words_length.size else 1
    columns = np.arange(width, dtype=np.int64)
    gather = info_at[:, None] + columns[None, :]
    keys = np.where(columns[None, :] <= words_length[:, None],
                    buf[np.minimum(gather, buf.size - 1)], 0).astype(np.uint8)
    keys = np.concatenate([flex_fde[fde_of_row].astype(np.uint8)[:, None], keys], axis=1)
    keys = np.ascontiguousarray(keys)
    void_keys = keys.view(np.dtype((np.void, keys.shape[1]))).ravel()
    unique_keys, inverse = np.unique(void_keys, return_inverse=True)
    inverse = inverse.ravel()
    formatter = _RowFormatter(reader, style)
    texts = []
    for key in unique_keys:
        raw = bytes(key)
        flex, row_info = bool(raw[0]), raw[1]
        count = (row_info >> 1) & 0xF
        size = WORD_SIZE_OF_CODE[(row_info >> 5) & 3]
        words = word_struct(h.big_endian, count, size).unpack_from(raw, 2) if count else ()
        if flex and count:
            from .decode import FLEX_CONTROL_POSITIONS

            mask = (1 << (8 * size)) - 1
            as_list = list(words)
            for position in FLEX_CONTROL_POSITIONS.get(count, ()):
                as_list[position] &= mask
            words = tuple(as_list)
        fre = FRE(0, tuple(words), BaseReg(row_info & 1), bool(row_info & 0x80), size)
        texts.append(formatter.columns(fre, flex).encode("ascii"))
    # Rows: fixed-width records (4 spaces, 16 hex digits, 2 spaces, text, newline) padded
    # with NUL bytes, then the NULs squeezed out: no per-byte index arrays.
    width = max((len(text) for text in texts), default=0) + 1
    text_table = np.zeros((len(texts), width), dtype=np.uint8)
    for unique, text in enumerate(texts):
        text_table[unique, :len(text)] = np.frombuffer(text, dtype=np.uint8)
        text_table[unique, len(text)] = 0x0A
    records = np.empty((positions.size, 22 + width), dtype=np.uint8)
    records[:, :4] = 0x20
    address_bytes = address.astype(">u8").view(np.uint8).reshape(-1, 8)
    records[:, 4:20:2] = _HEX[address_bytes >> 4]
    records[:, 5:20:2] = _HEX[address_bytes & 0xF]
    records[:, 20:22] = 0x20
    records[:, 22:] = text_table[inverse]
    flat = records.ravel()
    rows = flat[flat != 0].tobytes()
    row_bytes = np.array([len(text) + 23 for text in texts], dtype=np.int64)[inverse]
    fde_rows_end = np.cumsum(np.bincount(fde_of_row, weights=row_bytes,
                                         minlength=h.num_fdes)).astype(np.int64).tolist()

    # Per-FDE prefix (blank line, func idx line, column header), then its rows.
    b_key_abi = h.abi in (ABI.AARCH64_ENDIAN_BIG, ABI.AARCH64_ENDIAN_LITTLE)
    suffix_code = (((info & INFO_SIGNAL_BIT) != 0).astype(np.int64)
                   | (flex_fde.astype(np.int64) << 1)
                   | ((((info & 0x20) != 0) & b_key_abi).astype(np.int64) << 2)
                   | (mask_fde.astype(np.int64) << 3))
    suffixes = [_prefix_suffix(code, style) for code in range(16)]
    starts = table["start"].tolist()
    sizes = table["size"].tolist()
    codes = suffix_code.tolist()
    view = memoryview(rows)
    pieces: list[bytes | memoryview] = []
    append = pieces.append
    previous = 0
    for index in range(h.num_fdes):
        append(b"%s    func idx [%d]: pc = %#x, size = %d bytes%s" % (
            b"\n" if index else b"", index, starts[index], sizes[index], suffixes[codes[index]]))
        end = fde_rows_end[index]
        if end != previous:
            append(view[previous:end])
            previous = end
    head = ("\n".join(header_lines(reader, name, style)) + "\n").encode("ascii")
    return head + b"".join(pieces)


def _prefix_suffix(code: int, style: Any) -> bytes:
    """End of a func idx line (attr, pauth) plus the column header, by a 4-bit code:
    1 signal, 2 flex, 4 pauth key B (AArch64), 8 PCMASK."""
    text = ""
    if style.v3:
        attr = ("S" if code & 1 else "") + ("F" if code & 2 else "")
        if attr:
            text += f', attr = "{attr}"'
    if code & 4:
        text += ", pauth = B key"
    return text.encode("ascii") + b"\n" + (_HEADER_MASK if code & 8 else _HEADER_INC)


__all__ = ["dump_vectorized"]
