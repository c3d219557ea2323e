"""A symbol table as the bytes of a cache entry, read back in place.

The layout: the CRC-32 of what follows its first 16 bytes (uint32, then 4 zero bytes),
the number of symbols (uint64), their starts and ends (uint64 each), where each name
starts in the names (uint32, one more than the symbols), then the names' UTF-8 bytes; in
this machine's byte order (the cache is the machine's own). Read back, the arrays are
views of the bytes and a name is decoded when it is printed: a table is printed from a
few of its names, and libc's 5,000 symbols took ~1.7 ms to unmarshal and check as lists,
at every run (``sframe stack`` is measured against gdb).

The kernel's table (:mod:`.kernel`) has its own layout: the same prefix, starts and ends,
then where each name starts and ends in an area of bytes (uint32 each), then the area
(kallsyms' text itself where numpy read it: :func:`spans_entry_parts`, :func:`spans_from`).
It is mapped and checked by the CRC; an ELF file's (:mod:`.symbols`) is read through the
cache's digest, which vouches for it the same way. Both are read as spans
(:class:`SpanNames`; an ELF file's entry's offsets are the spans' ends and starts).
:meth:`.symbols.SymbolTable.from_entry`, :meth:`~.symbols.SymbolTable.from_spans` and
:meth:`~.symbols.SymbolTable.entry` read and write a table so.
"""

from __future__ import annotations

import struct
from itertools import accumulate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from array import array
    from collections.abc import Sequence
    from typing import Any

PREFIX = struct.Struct("=I4xQ")


def entry(starts: array[int], ends: array[int], names: list[bytes]) -> bytes:
    """The entry of a table's parallel arrays (``names`` encoded)."""
    from array import array  # (here: a warm run reads entries, and array imports collections)

    offsets = array("I", accumulate(map(len, names), initial=0))
    return entry_of(starts.tobytes(), ends.tobytes(), offsets.tobytes(), b"".join(names))


def entry_of(starts: bytes | memoryview, ends: bytes | memoryview,
             offsets: bytes | memoryview, names: bytes | memoryview) -> bytes:
    """The entry of a table's arrays in this machine's order (uint64 starts and ends,
    uint32 offsets of the names, one more than the symbols) and its names' bytes, each as
    bytes or a view of contiguous memory (a numpy array's ``data``). The CRC is chained
    over the parts and they are copied once, behind the prefix: kallsyms' entry is ~5 MB,
    and each copy of it cost a first run ~1.5 ms and ~1,300 page faults in the child
    making it."""
    return b"".join(_prefixed([starts, ends, offsets, names]))


def spans_entry_parts(starts: bytes | memoryview, ends: bytes | memoryview,
                      firsts: bytes | memoryview, lasts: bytes | memoryview,
                      area: bytes | memoryview) -> list[bytes | memoryview]:
    """The entry of a table whose names are spans of a byte ``area``, as its parts (the
    prefix, then each given part, not joined): uint64 starts and ends, uint32 ``firsts``
    and ``lasts`` (name k is ``area[firsts[k]:lasts[k]]``), then the area. The kernel's
    table (:mod:`.kernel`): read with numpy, its names are spans of kallsyms' own text,
    which is kept whole, so a first run makes no name blob (~9-13 ms and ~1,200-2,400 page faults of
    its ~35 CPU-ms, in the child that parses it) and writes the parts as they are."""
    return _prefixed([starts, ends, firsts, lasts, area])


def _prefixed(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    """The prefix, then ``parts`` (the first the uint64 starts: their count): the CRC
    chained over the count and the parts, none copied."""
    import zlib  # here: a warm run reads entries, and only the kernel's check their CRC

    count = memoryview(parts[0]).nbytes // 8
    crc = zlib.crc32(struct.pack("=Q", count))
    for part in parts:
        crc = zlib.crc32(part, crc)
    return [PREFIX.pack(crc, count), *parts]


def intact(payload: memoryview) -> bool:
    """Whether ``payload`` is whole and undamaged (its CRC)."""
    import zlib

    return (len(payload) >= PREFIX.size
            and zlib.crc32(payload[8:]) == PREFIX.unpack_from(payload)[0])


if TYPE_CHECKING:
    _Names = Sequence[str]
else:  # collections.abc.Sequence would import collections (~1 ms of a `sframe stack`)
    _Names = object


class SpanNames(_Names):
    """Names decoded on demand from spans of an entry's bytes, name k at
    ``area[firsts[k]:lasts[k]]`` (a table is printed from a few). A sequence of str:
    iterated by index (the sequence protocol) and sliced."""

    def __init__(self, firsts: Sequence[int], lasts: Sequence[int],
                 area: bytes | memoryview) -> None:
        self._firsts, self._lasts, self._area = firsts, lasts, area

    def __len__(self) -> int:
        return len(self._firsts)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError(f"symbol {index} of {count}")
        return str(self._area[self._firsts[index]:self._lasts[index]], "utf-8", "replace")


def spans_from(payload: bytes | memoryview, *, empty_ok: bool = False
               ) -> tuple[Sequence[int], Sequence[int], SpanNames] | None:
    """The starts, ends and names of an intact entry of :func:`spans_entry_parts`' layout,
    views of ``payload``, or None if it is not shaped as one (or holds no symbol, unless
    ``empty_ok``). As for :func:`arrays_from`, the order of the starts is not checked, and a
    span outside the area (a hand-made entry) gives a name cut to the area, not an error."""
    view = memoryview(payload)
    if len(view) < PREFIX.size:
        return None
    count = PREFIX.unpack_from(view)[1]
    first = PREFIX.size
    area_at = first + 24 * count
    if (count == 0 and not empty_ok) or area_at > len(view):
        return None
    starts = view[first:first + 8 * count].cast("Q")
    ends = view[first + 8 * count:first + 16 * count].cast("Q")
    firsts = view[first + 16 * count:first + 20 * count].cast("I")
    lasts = view[first + 20 * count:area_at].cast("I")
    return starts, ends, SpanNames(firsts, lasts, view[area_at:])


def arrays_from(payload: bytes | memoryview, *, empty_ok: bool = False
                ) -> tuple[Sequence[int], Sequence[int], SpanNames] | None:
    """The starts, ends and names of an intact entry, views of ``payload``, or None if it
    is not shaped as one (or holds no symbol, unless ``empty_ok``). The order of the
    starts is not checked here (a pass over them costs what reading in place saved): the
    CRC or the cache's digest vouches for an entry of our writing, and of a hand-made one
    with starts out of order a lookup gives a wrong name, not an error (bisection reads
    within the arrays; a name's slice is clamped to the names' bytes)."""
    view = memoryview(payload)
    if len(view) < PREFIX.size:
        return None
    count = PREFIX.unpack_from(view)[1]
    first = PREFIX.size
    names_at = first + 20 * count + 4
    if (count == 0 and not empty_ok) or names_at > len(view):
        return None
    starts = view[first:first + 8 * count].cast("Q")
    ends = view[first + 8 * count:first + 16 * count].cast("Q")
    offsets = view[first + 16 * count:names_at].cast("I")
    if offsets[0] != 0 or offsets[-1] != len(view) - names_at:
        return None
    return starts, ends, SpanNames(offsets[:-1], offsets[1:], view[names_at:])
