"""A growable SFrame section for JIT code: functions added, invalidated and compacted.

The design in the seeds (LSFMM "SFrame for JIT code"): the runtime appends a function's
FDE and rows as it compiles the code, marks them invalid when it frees the code, and
reclaims the space later, when it suits it ("compaction"); FDEs need not be sorted.

Kept here as an arena, as a runtime would hold it: each function's FRE block (V3: its
attribute record and rows, encoded once, by :mod:`pysframe.format.encode`) is appended
to the FRE area and its entry to the index; invalidating a function marks its entry dead
and leaves its block as a hole (no bytes move). :meth:`GrowableSection.section_bytes` gives the section at any moment: today's V3
format has no "invalid" bit, and ``sframe validate`` wants the FRE blocks to tile their
sub-section, so the holes are left out there (a copy), and ``SFRAME_F_FDE_SORTED`` is set
only while the live functions happen to be in address order. :meth:`compact` reclaims
the holes and sorts the index; after it, the arena is the section's FRE sub-section as
it stands. The caller's ``budget`` bounds the arena and index together: an add that does
not fit compacts first, then fails with :class:`SectionFull`.

Lookups (:meth:`GrowableSection.find`) work between any two operations, from the live
functions' starts kept sorted in blocks of at most ``2 * BLOCK`` (:class:`_SortedStarts`, as
``sortedcontainers`` does): an add or an invalidate finds its block by bisection over the
blocks' last starts (O(log n) comparisons) and shifts at most one block's entries, whatever
n is; a block that outgrows ``2 * BLOCK`` is split, which shifts the list of blocks (n /
BLOCK entries) once per ``BLOCK`` adds to it. A single sorted list (``insort`` and
``list.pop``) shifted O(n) entries per operation instead: 2.7 / 4.1 / 10.3 us per
invalidate at 5k / 20k / 80k functions. ``bench/jit_growable.py`` prints each operation's
cost at 5k, 20k and 80k functions (an add is dominated by encoding the function's rows,
~20-30 us).
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from itertools import pairwise

from ..errors import PysframeError
from ..format.constants import (
    ABI,
    F_FDE_FUNC_START_PCREL,
    F_FDE_SORTED,
    FDE_SIZE,
    HEADER_SIZE,
    MAGIC,
    VERSION_3,
    PCType,
)
from ..format.encode import encode
from ..format.model import FDE, FRE, Section
from ..records import field, record_class

#: The size of an FDE index entry in a V3 section.
ENTRY_SIZE = FDE_SIZE[VERSION_3]

#: Half the largest block of :class:`_SortedStarts` (a block is split past ``2 * BLOCK``).
BLOCK = 256


class SectionFull(PysframeError):
    """The function does not fit the section's budget, even after compaction."""


@record_class
class JitFunction:
    """A live (or invalidated) function: its FDE and where its FRE block sits."""

    fde: FDE
    block_at: int
    block: bytes
    valid: bool = True
    #: Its row starts, for lookups (the FDE's rows, in order).
    row_starts: list[int] = field(default_factory=list)


class GrowableSection:
    """An SFrame V3 section a JIT runtime grows function by function."""

    def __init__(self, abi: ABI = ABI.AMD64_ENDIAN_LITTLE, *, budget: int = 1 << 20,
                 address: int = 0) -> None:
        self.abi, self.budget, self.address = ABI(abi), budget, address
        self._arena = bytearray()
        #: The index, in its order (appended; sorted by compaction); live functions only.
        self._index: list[JitFunction] = []
        #: Live functions by start, and their starts, sorted (for lookups).
        self._by_start: dict[int, JitFunction] = {}
        self._starts = _SortedStarts()
        #: FRE bytes and index entries of invalidated functions, until compaction.
        self.holes = 0
        self.dead = 0

    # -- the operations ----------------------------------------------------------------

    def add(self, fde: FDE) -> None:
        """Add a function (its range and rows, as the generator builds them). It must not
        overlap a live function; invalidate the old code first."""
        if fde.size <= 0:
            raise ValueError(f"function at {fde.start:#x} has no size")
        if self._overlapping(fde.start, fde.end):
            raise ValueError(f"function {fde.start:#x}..{fde.end:#x} overlaps a live function")
        block = _fre_block(fde, self.abi)
        if self.footprint + ENTRY_SIZE + len(block) > self.budget:
            self.compact()
            if self.footprint + ENTRY_SIZE + len(block) > self.budget:
                raise SectionFull(f"function {fde.start:#x} needs {ENTRY_SIZE + len(block)} "
                                  f"bytes; {self.budget - self.footprint} of the budget of "
                                  f"{self.budget} are left after compaction")
        function = JitFunction(fde, len(self._arena), block,
                               row_starts=[fre.start for fre in fde.fres])
        self._arena += block
        self._index.append(function)
        self._by_start[fde.start] = function
        self._starts.add(fde.start)

    def invalidate(self, start: int) -> None:
        """The code at ``start`` was freed: its rows go (their space is a hole until
        :meth:`compact`)."""
        function = self._by_start.pop(start, None)
        if function is None:
            raise KeyError(f"no live function starts at {start:#x}")
        function.valid = False  # its index entry stays, dead, until compaction
        self._starts.remove(start)
        self.holes += len(function.block)
        self.dead += 1

    def compact(self) -> int:
        """Reclaim the holes and sort the index by address; returns the bytes reclaimed."""
        reclaimed = self.holes + ENTRY_SIZE * self.dead
        self._index = sorted(self._live(), key=lambda function: function.fde.start)
        arena = bytearray()
        for function in self._index:
            function.block_at = len(arena)
            arena += function.block
        self._arena, self.holes, self.dead = arena, 0, 0
        self._starts = _SortedStarts(function.fde.start for function in self._index)
        return reclaimed

    # -- reading it ----------------------------------------------------------------------

    @property
    def footprint(self) -> int:
        """Bytes the runtime holds: header, index entries and the FRE arena (the dead
        entries and holes too, until compaction)."""
        return HEADER_SIZE + ENTRY_SIZE * len(self._index) + len(self._arena)

    def _live(self) -> list[JitFunction]:
        return [function for function in self._index if function.valid] if self.dead else (
            self._index)

    @property
    def functions(self) -> list[FDE]:
        """The live functions, in index order."""
        return [function.fde for function in self._live()]

    @property
    def is_sorted(self) -> bool:
        return _ascending(self._live())

    def find(self, pc: int) -> tuple[FDE, FRE] | None:
        """The live function holding ``pc`` and its row for ``pc`` (None: no function,
        or ``pc`` before the function's first row)."""
        start = self._starts.floor(pc)
        if start is None:
            return None
        function = self._by_start[start]
        fde = function.fde
        if not fde.start <= pc < fde.end:
            return None
        offset = pc - fde.start
        if fde.pc_type == PCType.MASK and fde.rep_size:
            offset %= fde.rep_size
        row = bisect_right(function.row_starts, offset) - 1
        return None if row < 0 else (fde, fde.fres[row])

    def section_bytes(self) -> bytes:
        """The section now: V3, PC-relative starts, the live functions in index order
        (``SFRAME_F_FDE_SORTED`` when that order is by address), holes left out."""
        live = self._live()
        flags = F_FDE_FUNC_START_PCREL | (F_FDE_SORTED if _ascending(live) else 0)
        if self.holes:
            blocks, offsets = bytearray(), []
            for function in live:
                offsets.append(len(blocks))
                blocks += function.block
            fre_area = bytes(blocks)
        else:
            offsets = [function.block_at for function in live]
            fre_area = bytes(self._arena)
        order = ">" if self.abi.big_endian else "<"
        fixed_ra = -8 if self.abi.is_amd64 else 0
        num_fres = sum(len(function.fde.fres) for function in live)
        out = bytearray(struct.pack(order + "HBBBbbB", MAGIC, VERSION_3, flags, int(self.abi),
                                    0, fixed_ra, 0))
        out += struct.pack(order + "IIIII", len(live), num_fres, len(fre_area), 0,
                           len(live) * ENTRY_SIZE)
        for position, (function, offset) in enumerate(zip(live, offsets, strict=True)):
            entry_at = HEADER_SIZE + position * ENTRY_SIZE
            relative = function.fde.start - self.address - entry_at
            out += struct.pack(order + "qII", relative, function.fde.size, offset)
        return bytes(out + fre_area)

    def _overlapping(self, start: int, end: int) -> bool:
        below = self._starts.floor(end - 1)
        return below is not None and self._by_start[below].fde.end > start


class _SortedStarts:
    """Distinct integers kept sorted in blocks (each non-empty, at most ``2 * BLOCK`` long),
    with each block's last element in ``_lasts``: adding or removing one shifts one block."""

    def __init__(self, values: Iterable[int] = ()) -> None:
        ordered = sorted(values)
        self._blocks = [ordered[at:at + BLOCK] for at in range(0, len(ordered), BLOCK)]
        self._lasts = [block[-1] for block in self._blocks]

    def add(self, value: int) -> None:
        if not self._blocks:
            self._blocks.append([value])
            self._lasts.append(value)
            return
        at = bisect_left(self._lasts, value)
        if at == len(self._blocks):
            at -= 1
            self._blocks[at].append(value)
            self._lasts[at] = value
        else:
            insort(self._blocks[at], value)
        block = self._blocks[at]
        if len(block) > 2 * BLOCK:
            self._blocks[at:at + 1] = [block[:BLOCK], block[BLOCK:]]
            self._lasts[at:at + 1] = [block[BLOCK - 1], block[-1]]

    def remove(self, value: int) -> None:
        at = bisect_left(self._lasts, value)
        block = self._blocks[at]
        del block[bisect_left(block, value)]
        if block:
            self._lasts[at] = block[-1]
        else:
            del self._blocks[at], self._lasts[at]

    def floor(self, value: int) -> int | None:
        """The largest element <= ``value`` (None: there is none)."""
        at = bisect_left(self._lasts, value)
        if at < len(self._blocks) and self._blocks[at][0] <= value:
            block = self._blocks[at]
            return block[bisect_right(block, value) - 1]
        return self._lasts[at - 1] if at else None

    def __len__(self) -> int:
        return sum(len(block) for block in self._blocks)


def _ascending(functions: list[JitFunction]) -> bool:
    return all(a.fde.start < b.fde.start for a, b in pairwise(functions))


def _fre_block(fde: FDE, abi: ABI) -> bytes:
    """The function's FRE block as a V3 section holds it (attribute record, then rows),
    from the format's own encoder (one function alone: its block follows its entry)."""
    alone = encode(Section(VERSION_3, abi, cfa_fixed_ra_offset=-8 if abi.is_amd64 else 0,
                           fdes=[FDE(fde.start, fde.size, list(fde.fres), fde.pc_type,
                                     fde.fde_type, fde.pauth_key_b, fde.signal,
                                     fde.rep_size, fde.fre_type)]))
    return alone[HEADER_SIZE + ENTRY_SIZE:]
