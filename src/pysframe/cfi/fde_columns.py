"""What :func:`~.eh_frame.fde_ranges` gives, as numpy columns, for a large ``.eh_frame``.

Why by hand: a first run indexes every binary it unwinds through with one pass over its
``.eh_frame`` (:mod:`pysframe.generate.on_demand`); read one FDE at a time that is ~1 us
an FDE, ~45 ms for GCC's cc1 (45k FDEs), in each worker that meets it. Here the entries
are walked as ``fde_ranges`` walks them (each entry's length read in turn: where the next
one starts cannot be found otherwise), then every FDE whose CIE says ``pcrel|sdata4``
addresses and no LSDA (what GCC and Clang write) is read at once, by gathers over the
section's bytes; any other FDE is read by the full parser in its turn, errors and all.
Used where numpy is loaded already (the batch engine); tests/test_fde_columns.py holds
it to ``fde_ranges`` on real and damaged sections.
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from .eh_frame import CFIError, _Parser, plain_address_mask
from .leb128 import DecodeError

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
_WORD = 1 << 64
#: CIEs told apart one pass each; a section with more is sorted instead.
_FEW_CIES = 16


def fde_columns(data: bytes | memoryview, section_address: int, *, big_endian: bool = False,
                address_size: int = 8, hints: I64 | None = None
                ) -> tuple[U64, U64, I64] | None:
    """(pc_begin, pc_range, offset) of every FDE :func:`~.eh_frame.fde_ranges` gives, in
    its order, as three arrays; None for a section it reads with the full parser from
    some entry on (a 64-bit entry), or with a value outside 64 bits. ``hints``: offsets
    where entries may start (:func:`hinted_offsets`), which only speed the walk up."""
    parser = _Parser(data, section_address, big_endian, address_size, False)
    view = parser.data
    walked = _walk(view, parser.order, hints)
    if walked is None:
        return None
    offsets, ends = walked
    size = len(view)
    octets = np.frombuffer(view, np.uint8)
    whole = offsets + 8 <= ends  # (shorter ones hold no CIE pointer: skipped)
    offsets, ends = offsets[whole], ends[whole]
    cie_ids = _gather(octets, offsets + 4, parser.order + "u4", size).astype(np.int64)
    fde = cie_ids != 0
    offsets, ends, cie_ids = offsets[fde], ends[fde], cie_ids[fde]
    masks = _address_masks(parser, offsets + 4 - cie_ids)
    # Read by gathers: a plain CIE, the augmentation length in one byte, the data inside.
    plain = (masks != 0) & (offsets + 17 <= ends)
    lengths = np.full(len(offsets), 0x80, np.int64)
    lengths[plain] = _gather(octets, offsets[plain] + 16, "u1", size)
    plain &= (lengths < 0x80) & (offsets + 17 + lengths <= ends)
    begins = np.zeros(len(offsets), np.uint64)
    extents = np.zeros(len(offsets), np.uint64)
    at = np.flatnonzero(plain)
    signed = parser.order + "i4"
    base = (np.uint64(section_address % _WORD) + offsets[at].astype(np.uint64)
            + np.uint64(8))
    begins[at] = (base + _gather(octets, offsets[at] + 8, signed, size).astype(np.int64)
                  .astype(np.uint64)) & masks[at]
    extents[at] = (_gather(octets, offsets[at] + 12, signed, size).astype(np.int64)
                   .astype(np.uint64)) & masks[at]
    kept = plain.copy()
    for k in np.flatnonzero(~plain).tolist():  # the others: the full parser, one by one
        start, end = int(offsets[k]), int(ends[k])
        try:
            found = parser._fde(start, start + 8, end, start + 4 - int(cie_ids[k]))
        except (CFIError, DecodeError, struct.error, IndexError, ValueError):
            continue
        if not (0 <= found.pc_begin < _WORD and 0 <= found.pc_range < _WORD):
            return None
        begins[k], extents[k], kept[k] = found.pc_begin, found.pc_range, True
    return begins[kept], extents[kept], offsets[kept]


def _walk(view: bytes | memoryview, order: str, hints: I64 | None = None
          ) -> tuple[I64, I64] | None:
    """The (start, end) of every entry, as ``fde_ranges`` walks them (to a zero length or
    an entry past the end); None at a 64-bit entry. With ``hints`` (offsets where entries
    may start), a run of hinted entries, each ending where the next hinted one starts, is
    taken at once (:class:`_Runs`); from anywhere else (a CIE, an entry the hints miss,
    one that ends the walk) entries are read one at a time. Wrong hints cost time only:
    the walk goes where the lengths say."""
    unpack = struct.Struct(order + "I").unpack_from
    size = len(view)
    runs = _Runs(view, order, hints) if hints is not None else None
    parts: list[I64] = []
    single: list[int] = []
    offset = 0
    while offset + 4 <= size:
        run = runs.starting_at(offset) if runs is not None else None
        if run is not None:
            parts += [np.array(single, np.int64), run[0]]
            single, offset = [], run[1]
            continue
        length = unpack(view, offset)[0]
        if length == 0:
            break
        if length == 0xFFFFFFFF:
            return None
        end = offset + 4 + length
        if end > size:
            break
        single.append(offset)
        offset = end
    parts.append(np.array(single, np.int64))
    first = np.concatenate(parts)
    return first, np.append(first[1:], offset) if len(first) else first


class _Runs:
    """Hinted entries in runs: each ends where the next hinted one starts, none ends the
    walk (a zero or 64-bit length, or past the end: those are read one at a time)."""

    def __init__(self, view: bytes | memoryview, order: str, hints: I64) -> None:
        size = len(view)
        hinted = np.sort(hints[(hints >= 0) & (hints <= size - 4)])  # (np.unique: slower)
        self.hinted = hinted = hinted[np.append(True, hinted[1:] != hinted[:-1])]
        octets = np.frombuffer(view, np.uint8)
        self.ends = ends = hinted + 4 + _gather(octets, hinted, order + "u4", size).astype(
            np.int64)
        self.stop = (ends - hinted == 4) | (ends - hinted == 0xFFFFFFFF + 4) | (ends > size)
        self.breaks = np.flatnonzero(self.stop | np.append(ends[:-1] != hinted[1:], True))

    def starting_at(self, offset: int) -> tuple[I64, int] | None:
        """(the starts of the run of entries from ``offset``, where the last one ends), or
        None when no run starts there."""
        at = int(np.searchsorted(self.hinted, offset))
        if at == len(self.hinted) or int(self.hinted[at]) != offset or self.stop[at]:
            return None
        last = int(self.breaks[np.searchsorted(self.breaks, at)])  # (the last hint breaks)
        last -= bool(self.stop[last])  # (an entry that ends the walk: read one at a time)
        return self.hinted[at:last + 1], int(self.ends[last])


def hinted_offsets(hdr: bytes | memoryview, hdr_address: int, eh_frame_address: int, *,
                   big_endian: bool = False) -> I64 | None:
    """The .eh_frame offsets of the FDEs ``.eh_frame_hdr``'s search table names (hints for
    :func:`fde_columns`: a stale or hostile table only slows the walk), or None when it
    is not one ld writes (version 1, a count as udata4, a table of datarel sdata4)."""
    order = ">" if big_endian else "<"
    if len(hdr) < 12 or hdr[0] != 1 or hdr[2] != 0x03 or hdr[3] != 0x3B:
        return None
    if hdr[1] in (0x1B, 0x03, 0x0B):  # (eh_frame_ptr: pcrel|sdata4, udata4, sdata4)
        count = struct.unpack_from(order + "I", hdr, 8)[0]
    else:
        return None
    if 12 + 8 * count > len(hdr):
        return None
    table = np.frombuffer(hdr, np.dtype(order + "i4"), 2 * count, 12).astype(np.int64)
    return table[1::2] + (hdr_address - eh_frame_address)


def _gather(octets: npt.NDArray[np.uint8], at: I64, kind: str, size: int) -> npt.NDArray[
        np.generic]:
    """The values of type ``kind`` at the byte offsets ``at`` (each inside ``size``,
    unaligned)."""
    width = np.dtype(kind).itemsize
    if not len(at):
        return np.zeros(0, kind)
    assert int(at.min()) >= 0 and int(at.max()) + width <= size
    rows = octets[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(rows).view(kind).ravel()


def _address_masks(parser: _Parser, cie_offsets: I64) -> U64:
    """Per FDE, the mask of its addresses if its CIE is one whose FDEs are read by gathers
    (:func:`~.eh_frame.plain_address_mask`), else 0."""
    masks = np.zeros(len(cie_offsets), np.uint64)
    left = np.ones(len(cie_offsets), bool)
    for _ in range(_FEW_CIES):  # a binary's FDEs share a few CIEs: one pass over each
        first = int(np.argmax(left))
        if not left[first]:
            return masks
        same = left & (cie_offsets == cie_offsets[first])
        masks[same] = plain_address_mask(parser, int(cie_offsets[first]))
        left &= ~same
    unique, inverse = np.unique(cie_offsets[left], return_inverse=True)  # (many: sorted)
    masks[left] = np.array([plain_address_mask(parser, offset) for offset in unique.tolist()],
                           np.uint64)[inverse.ravel()]
    return masks


__all__ = ["fde_columns", "hinted_offsets"]
