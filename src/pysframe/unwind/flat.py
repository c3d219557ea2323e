"""A module's SFrame table flattened into numpy arrays, for the batch tracer.

One sorted array of row start addresses (link-time) and one packed rule word per
row. Every function contributes a "no rule" row at its start, its own rows, and a
"no rule" row at its end, so ``searchsorted(starts, pc, "right") - 1`` alone finds
the row of any pc (rows starting at the same address: the last one wins, which is
the one the per-function lookup would choose). PCMASK (PLT) functions are one row
of kind MASK pointing into a small side table, resolved per pc in Python. Rows
whose rules are not the common default (flexible V3 rules, register-based CFA,
outermost, mangled RA, offsets too large for the packed fields) are kind RARE:
the batch hands those samples to the scalar tracer, which applies the full rules.

The rows are the lookup's own :class:`~pysframe.format.lookup.FrameRow` values,
classified exactly as :meth:`Unwinder._plan_in <.unwinder.Unwinder>` classifies
them, so both tracers follow the same rules.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import numpy.typing as npt

from ..format.constants import ABI, DWARF_REGS, FDEType, PCType
from ..format.decode import FDEEntry
from ..format.errors import SFrameError
from ..format.lookup import FrameRow, RuleKind, SFrameLookup
from ..records import record_class

#: Row kinds (the low two bits of a rule word).
KIND_NONE = 0  #: no SFrame rule here: the frame-pointer fallback
KIND_DEFAULT = 1  #: CFA = SP/FP + offset, RA (and maybe FP) loaded from CFA + offset
KIND_RARE = 2  #: any other rule: the scalar tracer
KIND_MASK = 3  #: a PCMASK function: the side table entry is the word's CFA field

#: The word of an outermost row (RA undefined: the chain ends there).
OUTERMOST = KIND_RARE | 1 << 2
#: The word of a function of an on-demand table whose rows are not made yet (a RARE
#: word: whoever does not make them hands the pc to the scalar tracer, which does).
PENDING = KIND_RARE | 1 << 3
#: Bit 2: CFA is FP-based (else SP-based). Bit 3: FP is saved (else unchanged).
FP_BASED = 1 << 2
FP_SAVED = 1 << 3
#: Three biased 20-bit offset fields: CFA at bit 4, RA at bit 24, FP at bit 44.
FIELD_BITS = 20
BIAS = 1 << (FIELD_BITS - 1)
FIELD_MASK = (1 << FIELD_BITS) - 1
CFA_SHIFT, RA_SHIFT, FP_SHIFT = 4, 24, 44

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


def _fits(offset: int) -> bool:
    return -BIAS <= offset < BIAS


def pack_row(row: FrameRow | None, sp_reg: int, fp_reg: int) -> int:
    """The rule word of one row (``None``: no rule)."""
    if row is None:
        return KIND_NONE
    if row.outermost:
        return OUTERMOST
    cfa, ra, fp = row.cfa, row.ra, row.fp
    if ( row.ra_mangled or cfa.deref or cfa.regnum not in (sp_reg, fp_reg)
            or ra.kind != RuleKind.CFA or not ra.deref
            or not (fp.kind == RuleKind.RETAIN or (fp.kind == RuleKind.CFA and fp.deref))):
        return KIND_RARE
    fp_offset = fp.offset if fp.kind == RuleKind.CFA else 0
    if not (_fits(cfa.offset) and _fits(ra.offset) and _fits(fp_offset)):
        return KIND_RARE
    word = KIND_DEFAULT
    if cfa.regnum != sp_reg:
        word |= FP_BASED
    if fp.kind == RuleKind.CFA:
        word |= FP_SAVED
    word |= (cfa.offset + BIAS) << CFA_SHIFT
    word |= (ra.offset + BIAS) << RA_SHIFT
    word |= (fp_offset + BIAS) << FP_SHIFT
    return word


def unpack_offsets(words: U64) -> tuple[I64, I64, I64]:
    """The CFA, RA and FP offsets of packed default rule words."""
    signed = words.astype(np.int64, copy=False)  # fields are below bit 63: no sign issue
    mask = np.int64(FIELD_MASK)
    cfa = ((signed >> CFA_SHIFT) & mask) - BIAS
    ra = ((signed >> RA_SHIFT) & mask) - BIAS
    fp = ((signed >> FP_SHIFT) & mask) - BIAS
    return cfa, ra, fp


@record_class
class MaskFunction:
    """A PCMASK function: its rows repeat every ``rep_size`` bytes."""

    start: int
    end: int
    rep_size: int
    row_starts: list[int]
    words: list[int]

    def word(self, pc: int) -> int:
        offset = (pc - self.start) % self.rep_size
        k = bisect_right(self.row_starts, offset) - 1
        return KIND_NONE if k < 0 else self.words[k]


@record_class
class FlatTable:
    """A module's rows: ``starts`` (link-time, ascending) and ``words``; ``rare_all``: the
    table could not be flattened (overlapping functions, a corrupt function): every pc of
    the module goes to the scalar tracer, which reports the fault as it does today."""

    starts: U64
    words: U64
    masks: list[MaskFunction]
    rare_all: bool = False

    def lookup(self, pcs: U64) -> U64:
        """The rule word of each link-time pc (MASK words resolved)."""
        if self.rare_all:
            return np.full(len(pcs), KIND_RARE, dtype=np.uint64)
        index = np.searchsorted(self.starts, pcs, side="right").astype(np.int64) - 1
        words = self.words[np.maximum(index, 0)]
        words[index < 0] = KIND_NONE
        masked = np.flatnonzero((words & np.uint64(3)) == KIND_MASK)
        for i in masked.tolist():
            entry = self.masks[int(words[i]) >> CFA_SHIFT]
            words[i] = entry.word(int(pcs[i]))
        return words


def with_masks_from(words: U64, first: int) -> U64:
    """``words`` with their MASK words' indices moved up by ``first`` (a copy when any
    moves): a table's PCMASK functions appended after ``first`` others."""
    masked = (words & np.uint64(3)) == KIND_MASK
    if not first or not masked.any():
        return words
    return words + np.where(masked, np.uint64(first << CFA_SHIFT), np.uint64(0))


RARE_TABLE = FlatTable(np.zeros(0, np.uint64), np.zeros(0, np.uint64), [], rare_all=True)


#: Rule words by what a row's rules are made of: the table's ABI, version and fixed
#: offsets, the function's kind, and the row's base register, RA mangling and data words
#: (nothing else goes into them). A binary's rows take a few dozen shapes, and a first
#: run flattens thousands of single-function tables, each a new lookup: each shape is
#: made into rules once. Rows whose rules do not decode are not kept (they raise again).
_WORDS: dict[tuple[object, ...], int] = {}
_WORDS_KEPT = 1 << 14


def flatten(lookup: SFrameLookup, abi: ABI) -> FlatTable:
    """The flat table of one SFrame section (see the module docstring)."""
    regs = DWARF_REGS[abi]
    reader = lookup.reader
    header = reader.header
    shape = (abi, reader.abi(), header.version, header.cfa_fixed_fp_offset,
             header.cfa_fixed_ra_offset)
    if lookup.made_from is not None:
        made = made_rows(lookup, shape)
        if made is not None:
            return made
    known = _WORDS
    try:
        entries = sorted(reader.fdes(), key=lambda entry: entry.start)
    except SFrameError:
        return RARE_TABLE
    starts: list[int] = []
    words: list[int] = []
    masks: list[MaskFunction] = []
    previous_end: int | None = None
    decoded = 0
    try:
        for entry in entries:
            if previous_end is not None and entry.start < previous_end:
                return RARE_TABLE  # overlapping (or equal) starts: leave it to the scalar
            previous_end = entry.end
            if not (0 <= entry.start and entry.end < (1 << 63)):
                return RARE_TABLE
            if entry.fde_type not in (FDEType.DEFAULT, FDEType.FLEX):
                return RARE_TABLE
            row_words = []
            row_starts = []
            previous = -1
            # Each row is made here as the stepwise lookup makes it, with its checks (starts
            # rising, no more rows than the header counts), but not kept in the lookup's
            # per-function cache: a table of 366k rows held there took ~250 MiB.
            for k, (_, fre) in enumerate(reader.fres_with_offsets(entry)):
                decoded += 1
                if fre.start <= previous or decoded > reader.header.num_fres:
                    return RARE_TABLE
                previous = fre.start
                limit = entry.size
                if entry.pc_type == PCType.MASK and entry.rep_size:
                    limit = min(limit, entry.rep_size)
                if fre.start > entry.size and entry.pc_type != PCType.MASK:
                    return RARE_TABLE  # corrupt: the scalar tracer reports it
                if fre.start >= limit:
                    continue  # never the row of any pc (the stepwise lookup returns None)
                key = (shape, entry.fde_type, fre.base_reg, fre.mangled_ra, fre.words)
                word = known.get(key)
                if word is None:
                    word = pack_row(lookup.make_row(entry, k, fre), regs.sp, regs.fp)
                    if len(known) < _WORDS_KEPT:
                        known[key] = word
                row_starts.append(fre.start)
                row_words.append(word)
            starts.append(entry.start)
            words.append(KIND_NONE)
            if entry.pc_type == PCType.MASK:
                if entry.rep_size == 0:
                    return RARE_TABLE
                masks.append(MaskFunction(entry.start, entry.end, entry.rep_size, row_starts,
                                          row_words))
                words[-1] = KIND_MASK | ((len(masks) - 1) << CFA_SHIFT)
            else:
                starts.extend(entry.start + start for start in row_starts)
                words.extend(row_words)
            starts.append(entry.end)
            words.append(KIND_NONE)
    except SFrameError:
        return RARE_TABLE
    return FlatTable(np.array(starts, dtype=np.uint64), np.array(words, dtype=np.uint64),
                     masks)


def made_rows(lookup: SFrameLookup, shape: tuple[object, ...]) -> FlatTable | None:
    """What :func:`flatten` gives for a single-function table just encoded from
    ``lookup.made_from`` (with the header ``shape``), read from the FDE rather than
    decoded again, for an ordinary function (a row shape not met yet is made into its
    rules from the FDE's row, as :func:`flatten` makes it from the decoded one); None for
    any other (it is decoded). A first run flattens every function it makes: decoding
    them again was ~60% of that."""
    fde = lookup.made_from
    if fde is None or fde.fde_type != FDEType.DEFAULT or fde.pc_type != PCType.INC:
        return None
    start, size = fde.start, fde.size
    if not (0 <= start and start + size < (1 << 63)):
        return None
    known = _WORDS
    starts, words = [start], [KIND_NONE]
    previous = -1
    entry: FDEEntry | None = None
    for k, fre in enumerate(fde.fres):
        if not previous < fre.start < size:
            return None  # (the decoded table is rare, or has rows no pc reaches)
        previous = fre.start
        key = (shape, FDEType.DEFAULT, fre.base_reg, fre.mangled_ra, fre.words)
        word = known.get(key)
        if word is None:
            try:
                entry = entry or lookup.reader.fde(0)
                regs = DWARF_REGS[lookup.reader.abi()]
                word = pack_row(lookup.make_row(entry, k, fre), regs.sp, regs.fp)
            except SFrameError:
                return None  # (the decoded table says why)
            if len(known) < _WORDS_KEPT:
                known[key] = word
        starts.append(start + fre.start)
        words.append(word)
    starts.append(start + size)
    words.append(KIND_NONE)
    return FlatTable(np.array(starts, dtype=np.uint64), np.array(words, dtype=np.uint64), [])


__all__ = ["KIND_DEFAULT", "KIND_MASK", "KIND_NONE", "KIND_RARE", "OUTERMOST", "PENDING",
           "FlatTable", "MaskFunction", "flatten", "made_rows", "pack_row",
           "unpack_offsets", "with_masks_from"]
