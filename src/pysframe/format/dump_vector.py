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

from dataclasses import dataclass, field
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
from .decode import FLEX_CONTROL_POSITIONS, SFrameReader, word_struct
from .dump_style import DumpStyle, RowFormatter, header_lines
from .model import FRE

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
U64A = npt.NDArray[np.uint64]

#: Bytes of data words after an FRE info byte (-1: size code 3, invalid).
_WORDS_LENGTH = np.array([((info >> 1) & 0xF) * WORD_SIZE_OF_CODE[(info >> 5) & 3]
                          if (info >> 5) & 3 != 3 else -1 for info in range(256)], dtype=np.int64)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
#: Two hex digits per byte value, as little-endian uint16 (first digit in the low byte).
_HEX_PAIRS = (_HEX[np.arange(256) >> 4].astype("<u2") | (_HEX[np.arange(256) & 0xF].astype("<u2") << 8))
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


#: Functions per batch: keeps the temporaries in the CPU caches and the peak memory small.
BATCH_FDES = 8192


class _TextCache:
    """Column text (with newline) per distinct (flex, info byte, data words) key."""

    def __init__(self, reader: SFrameReader, style: DumpStyle) -> None:
        self.formatter = RowFormatter(reader, style)
        self.big_endian = reader.header.big_endian
        self.texts: dict[bytes, bytes] = {}

    def text(self, raw: bytes) -> bytes:
        text = self.texts.get(raw)
        if text is None:
            text = self._format(raw)
            self.texts[raw] = text
        return text

    def _format(self, raw: bytes) -> bytes:
        flex, row_info = bool(raw[0]), raw[1]
        count = (row_info >> 1) & 0xF
        size = WORD_SIZE_OF_CODE[(row_info >> 5) & 3]
        words = word_struct(self.big_endian, count, size).unpack_from(raw, 2) if count else ()
        if flex and count:
            mask = (1 << (8 * size)) - 1
            as_list = list(words)
            for position in FLEX_CONTROL_POSITIONS.get(count, ()):
                as_list[position] &= mask
            words = tuple(as_list)
        fre = FRE(0, tuple(words), BaseReg(row_info & 1), bool(row_info & 0x80), size)
        return self.formatter.columns(fre, flex).encode("ascii") + b"\n"


def dump_vectorized(reader: SFrameReader, name: str, style: DumpStyle) -> bytes | None:
    """The whole dump as bytes, or ``None`` when the section needs the careful path."""
    parts = dump_vectorized_parts(reader, name, style)
    return None if parts is None else b"".join(parts)


def dump_vectorized_parts(reader: SFrameReader, name: str, style: DumpStyle) -> list[bytes] | None:
    """The dump as a list of byte strings (to write one after the other), or ``None``."""
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
    b_key_abi = h.abi in (ABI.AARCH64_ENDIAN_BIG, ABI.AARCH64_ENDIAN_LITTLE)
    mask_fde = (info & 0x10) != 0
    flex_fde = (table["info2"] & 0x1F) == 1
    suffix_code = (((info & INFO_SIGNAL_BIT) != 0).astype(np.int64)
                   | (flex_fde.astype(np.int64) << 1)
                   | ((((info & 0x20) != 0) & b_key_abi).astype(np.int64) << 2)
                   | (mask_fde.astype(np.int64) << 3))
    batch = _Batch(buf, table, positions, start_size, num_fres, mask_fde, flex_fde, suffix_code,
                   [_prefix_suffix(code, style) for code in range(16)], _TextCache(reader, style),
                   h.big_endian)
    parts = [("\n".join(header_lines(reader, name, style)) + "\n").encode("ascii")]
    ranges = [(first, min(first + BATCH_FDES, h.num_fdes))
              for first in range(0, h.num_fdes, BATCH_FDES)]
    parts += [batch.text(first, last) for first, last in ranges]
    return parts


#: Mask keeping the info byte and ``n`` bytes of data words of a little-endian uint64.
_KEY_MASKS = np.array([(1 << (8 * (1 + n))) - 1 if n < 7 else (1 << 56) - 1 for n in range(61)],
                      dtype=np.uint64)
_POWERS_OF_TEN = np.array([10 ** k for k in range(9, -1, -1)], dtype=np.int64)
_NIBBLE_SHIFTS = np.arange(60, -1, -4, dtype=np.uint64)


def _constant(count: int, text: bytes) -> U8:
    return np.broadcast_to(np.frombuffer(text, dtype=np.uint8), (count, len(text)))


def _decimal(values: I64) -> U8:
    """Decimal digits of values below 2**32, right-aligned in 10 columns, leading zeros NUL."""
    digits = (values[:, None] // _POWERS_OF_TEN[None, :]) % 10
    out = (digits + 0x30).astype(np.uint8)
    out[:, :-1][values[:, None] < _POWERS_OF_TEN[None, :-1]] = 0
    return out


def _hexadecimal(values: U64A) -> U8:
    """Lowercase hex digits, right-aligned in 16 columns, leading zeros as NUL."""
    nibbles = (values[:, None] >> _NIBBLE_SHIFTS[None, :]) & np.uint64(0xF)
    out = _HEX[nibbles.astype(np.intp)]
    out[:, :-1][(values[:, None] >> _NIBBLE_SHIFTS[None, :-1]) == 0] = 0
    return out


@dataclass(slots=True)
class _Batch:
    """Formats the functions of one index range (see the module docstring)."""

    buf: U8
    table: dict[str, Any]
    positions: I64
    start_size: I64
    num_fres: I64
    mask_fde: Any
    flex_fde: Any
    suffix_code: I64
    suffixes: list[bytes]
    texts: _TextCache
    big_endian: bool
    rows_before: I64 = field(init=False)

    def __post_init__(self) -> None:
        self.rows_before = np.cumsum(self.num_fres) - self.num_fres

    def _keys(self, fde_of_row: I64, info_at: I64) -> tuple[list[bytes], I64]:
        """Distinct row keys of the batch and each row's index into them.

        A key is the flex flag, the info byte and the data words. When every row's
        words fit in 6 bytes (nearly always) the key is one uint64 read straight from
        the section; otherwise rows are compared as byte strings.
        """
        buf = self.buf
        words_length = _WORDS_LENGTH[buf[info_at]]
        longest = int(words_length.max())
        flex = self.flex_fde[fde_of_row]
        if longest <= 6 and info_at.size and int(info_at.max()) + 8 <= buf.size:
            windows = np.lib.stride_tricks.sliding_window_view(buf, 8)
            value = np.ascontiguousarray(windows[info_at]).view("<u8").ravel()
            value &= _KEY_MASKS[words_length]
            value |= flex.astype(np.uint64) << np.uint64(56)
            unique_packed, inverse = np.unique(value, return_inverse=True)
            unique_keys = [bytes((v >> 56,)) + (v & 0xFFFFFFFFFFFFFF).to_bytes(7, "little")
                           for v in unique_packed.tolist()]
            return unique_keys, inverse.ravel()
        width = longest + 1
        columns = np.arange(width, dtype=np.int64)
        keys = np.where(columns[None, :] <= words_length[:, None],
                        buf[np.minimum(info_at[:, None] + columns[None, :], buf.size - 1)],
                        0).astype(np.uint8)
        keys = np.concatenate([flex.astype(np.uint8)[:, None], keys], axis=1)
        void_keys = np.ascontiguousarray(keys).view(np.dtype((np.void, keys.shape[1]))).ravel()
        unique_void, inverse = np.unique(void_keys, return_inverse=True)
        return [bytes(key) for key in unique_void], inverse.ravel()

    def _prefixes(self, first: int, last: int) -> U8:
        """Prefix bytes of functions first..last-1, one NUL-padded row each."""
        count = last - first
        suffixes = self.suffixes
        suffix_width = max(map(len, suffixes))
        parts: list[U8] = [
            _constant(count, b"\n"),
            _constant(count, b"    func idx ["),
            _decimal(np.arange(first, last, dtype=np.int64)),
            _constant(count, b"]: pc = 0x"),
            _hexadecimal(self.table["start"][first:last]),
            _constant(count, b", size = "),
            _decimal(self.table["size"][first:last]),
            _constant(count, b" bytes"),
            np.frombuffer(b"".join(suffix.ljust(suffix_width, b"\0") for suffix in suffixes),
                          dtype=np.uint8).reshape(16, suffix_width)[self.suffix_code[first:last]],
        ]
        prefix = np.concatenate(parts, axis=1)
        if first == 0:
            prefix[0, 0] = 0  # no blank line before the first function
        return prefix

    def text(self, first: int, last: int) -> bytes:
        """The dump text of functions ``first`` to ``last - 1``."""
        table = self.table
        num_fres = self.num_fres[first:last]
        count = last - first
        row_first = int(self.rows_before[first])
        row_last = int(self.rows_before[last - 1] + self.num_fres[last - 1])
        positions = self.positions[row_first:row_last]
        fde_of_row = np.repeat(np.arange(first, last), num_fres)
        row_start_size = self.start_size[fde_of_row]
        info_at = positions + row_start_size
        row_start = _read_unsigned(self.buf, positions, row_start_size, self.big_endian)
        address = np.where(self.mask_fde[fde_of_row], np.uint64(0), table["start"][fde_of_row])
        address = address + row_start.astype(np.uint64)

        if positions.size:
            unique_keys, inverse = self._keys(fde_of_row, info_at)
            texts = [self.texts.text(key) for key in unique_keys]
        else:
            texts, inverse = [], np.zeros(0, dtype=np.int64)

        # NUL-padded records squeezed at the end: per function its prefix (blank line,
        # func idx line, column header) over ``chunks`` records, then one record per row
        # (4 spaces, 16 hex digits, 2 spaces, text). NULs may sit anywhere, so numbers
        # are written right-aligned in fixed fields with NULs for the leading zeros.
        width = max(22 + max(map(len, texts), default=0), 64)
        prefix = self._prefixes(first, last)
        chunks = -(-prefix.shape[1] // width)
        padded = np.zeros((count, chunks * width), dtype=np.uint8)
        padded[:, :prefix.shape[1]] = prefix
        fde_base = np.arange(count, dtype=np.int64) * chunks + (self.rows_before[first:last]
                                                                  - row_first)
        records = np.zeros((count * chunks + positions.size, width), dtype=np.uint8)
        records[(fde_base[:, None] + np.arange(chunks)[None, :]).ravel()] = \
            padded.reshape(count * chunks, width)
        if positions.size:
            row_record = (fde_of_row - first + 1) * chunks + np.arange(positions.size)
            text_table = np.zeros((len(texts), width - 22), dtype=np.uint8)
            for unique, text in enumerate(texts):
                text_table[unique, :len(text)] = np.frombuffer(text, dtype=np.uint8)
            address_bytes = address.astype(">u8").view(np.uint8).reshape(-1, 8)
            digits = np.empty((positions.size, 11), dtype="<u2")
            digits[:, :2] = 0x2020
            digits[:, 2:10] = _HEX_PAIRS[address_bytes]
            digits[:, 10] = 0x2020
            records[row_record, :22] = digits.view(np.uint8)
            records[row_record, 22:] = text_table[inverse]
        flat = records.ravel()
        squeezed: bytes = flat[flat != 0].tobytes()
        return squeezed


def _prefix_suffix(code: int, style: DumpStyle) -> bytes:
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


__all__ = ["BATCH_FDES", "dump_vectorized", "dump_vectorized_parts"]
