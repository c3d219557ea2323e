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
                address_size: int = 8) -> tuple[U64, U64, I64] | None:
    """(pc_begin, pc_range, offset) of every FDE :func:`~.eh_frame.fde_ranges` gives, in
    its order, as three arrays; None for a section it reads with the full parser from
    some entry on (a 64-bit entry), or with a value outside 64 bits."""
    parser = _Parser(data, section_address, big_endian, address_size, False)
    view = parser.data
    walked = _walk(view, parser.order)
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


def _walk(view: bytes | memoryview, order: str) -> tuple[I64, I64] | None:
    """The (start, end) of every entry, as ``fde_ranges`` walks them (to a zero length or
    an entry past the end); None at a 64-bit entry."""
    unpack = struct.Struct(order + "I").unpack_from
    size = len(view)
    starts: list[int] = []
    append = starts.append
    offset = 0
    while offset + 4 <= size:
        length = unpack(view, offset)[0]
        if length == 0:
            break
        if length == 0xFFFFFFFF:
            return None
        end = offset + 4 + length
        if end > size:
            break
        append(offset)
        offset = end
    first = np.array(starts, np.int64)
    return first, np.append(first[1:], offset) if len(first) else first


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


__all__ = ["fde_columns"]
