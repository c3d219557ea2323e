"""Finding the recovery rules for a PC: find the FDE, find the FRE, decode its rules.

The steps follow the Linux kernel's ``kernel/unwind/sframe.c`` (find FDE, read
FRE, recover CFA/RA/FP; every read bounds-checked; unsorted tables and
non-ascending FRE starts are detected), with two caches that make repeated
lookups cheap: the function start addresses as one sorted list (binary search
with :func:`bisect.bisect_right`, built once per section, correct also when the
section is not flagged sorted), and each function's decoded rows, built on
first use. A looked-up row is a shared immutable :class:`FrameRow`.
"""

from __future__ import annotations

import itertools
import struct
from bisect import bisect_right
from dataclasses import dataclass
from enum import IntEnum

from .constants import (
    ABI,
    DWARF_REGS,
    F_FDE_FUNC_START_PCREL,
    F_FDE_SORTED,
    FLEX_DEREF_P,
    FLEX_REG_P,
    FLEX_REGNUM_SHIFT,
    INFO_SIGNAL_BIT,
    S390X_CFA_OFFSET_ADJUSTMENT,
    S390X_CFA_OFFSET_ALIGNMENT,
    VERSION_2,
    VERSION_3,
    BaseReg,
    FDEType,
    PCType,
)
from .decode import FDEEntry, SFrameReader
from .errors import CorruptError
from .model import FRE


class RuleKind(IntEnum):
    """Where a value (CFA, RA or FP) of the caller comes from."""

    #: The register still holds it (valid only in the topmost frame for RA).
    RETAIN = 0
    #: CFA + offset (then loaded from memory if ``deref``).
    CFA = 1
    #: DWARF register ``regnum`` + offset (then loaded if ``deref``).
    REGISTER = 2


@dataclass(slots=True, frozen=True)
class Rule:
    """How to recover one value: ``[*](base + offset)``."""

    kind: RuleKind
    offset: int = 0
    regnum: int = -1
    deref: bool = False

    def __str__(self) -> str:
        if self.kind == RuleKind.RETAIN:
            return "same"
        base = "CFA" if self.kind == RuleKind.CFA else f"r{self.regnum}"
        text = f"{base}{self.offset:+d}"
        return f"*({text})" if self.deref else text


RETAIN = Rule(RuleKind.RETAIN)


@dataclass(slots=True, frozen=True)
class FrameRow:
    """The rules that hold for a range of PCs of one function."""

    fde_index: int
    fre_index: int
    func_start: int
    func_size: int
    #: Offset of the row's first PC from the function start (PCMASK: within a block).
    row_start: int
    cfa: Rule
    ra: Rule
    fp: Rule
    #: RA undefined: the outermost frame (FRE without data words).
    outermost: bool = False
    ra_mangled: bool = False
    pauth_key_b: bool = False
    signal: bool = False
    flex: bool = False


class SFrameLookup:
    """PC -> :class:`FrameRow` for one section (see the module docstring)."""

    __slots__ = (
        "_ends",
        "_fixed_fp",
        "_fixed_ra",
        "_fp",
        "_order",
        "_reader",
        "_rows",
        "_s390x",
        "_sp",
        "_starts",
        "_v2_s390x",
        "sorted_verified",
    )

    def __init__(self, reader: SFrameReader) -> None:
        self._reader = reader
        h = reader.header
        abi = reader.abi()
        regs = DWARF_REGS[abi]
        self._sp = regs.sp
        self._fp = regs.fp
        self._fixed_fp = h.cfa_fixed_fp_offset
        self._fixed_ra = h.cfa_fixed_ra_offset
        self._s390x = abi is ABI.S390X_ENDIAN_BIG
        self._v2_s390x = self._s390x and h.version <= VERSION_2
        starts = self._read_starts()
        #: True when the stored order is ascending (what SFRAME_F_FDE_SORTED promises).
        self.sorted_verified = all(a <= b for a, b in itertools.pairwise(starts))
        if self.sorted_verified:
            self._order: list[int] | None = None
            self._starts = starts
        else:
            order = sorted(range(len(starts)), key=starts.__getitem__)
            self._order = order
            self._starts = [starts[i] for i in order]
        self._ends: list[int] | None = None
        self._rows: dict[int, tuple[list[int], list[FRE], list[FrameRow | None], FDEEntry]] = {}

    def _read_starts(self) -> list[int]:
        """Absolute start addresses in stored order, from one pass over the FDE sub-section."""
        reader = self._reader
        h = reader.header
        order = ">" if h.big_endian else "<"
        size = h.fde_size
        if h.version == VERSION_3:
            fmt = order + "q8x"
        else:
            fmt = order + "i" + f"{size - 4}x"
        area = reader.buffer[h.fdes_start:h.fdes_end]
        fields = [value for (value,) in struct.iter_unpack(fmt, area)]
        base = reader.address
        if h.flags & F_FDE_FUNC_START_PCREL:
            first = base + h.fdes_start
            return [first + i * size + field for i, field in enumerate(fields)]
        return [base + field for field in fields]

    @property
    def declared_sorted(self) -> bool:
        return bool(self._reader.header.flags & F_FDE_SORTED)

    # --- step 1: find the FDE ----------------------------------------------------------

    def find_fde_index(self, pc: int) -> int | None:
        """Index of the FDE covering ``pc``, or ``None`` if no function covers it."""
        position = bisect_right(self._starts, pc) - 1
        if position < 0:
            return None
        index = position if self._order is None else self._order[position]
        entry = self._reader.fde(index)
        if pc < entry.start + entry.size:
            return index
        return None

    def find_fde(self, pc: int) -> FDEEntry | None:
        index = self.find_fde_index(pc)
        return None if index is None else self._reader.fde(index)

    # --- step 2: find the FRE ----------------------------------------------------------

    def _function_rows(self, index: int) -> tuple[list[int], list[FRE], list[FrameRow | None],
                                                  FDEEntry]:
        cached = self._rows.get(index)
        if cached is not None:
            return cached
        reader = self._reader
        entry = reader.fde(index)
        if entry.fde_type not in (FDEType.DEFAULT, FDEType.FLEX):
            raise CorruptError(f"FDE {index}: unknown FDE type {entry.fde_type}", entry.offset)
        if entry.pc_type == PCType.MASK and entry.rep_size == 0:
            raise CorruptError(f"FDE {index}: PCMASK FDE with rep_size 0", entry.offset)
        starts: list[int] = []
        fres: list[FRE] = []
        previous = -1
        for at, fre in reader.fres_with_offsets(entry):
            if fre.start <= previous:
                raise CorruptError(f"FDE {index}: FRE start {fre.start:#x} not above the previous "
                                   f"one ({previous:#x})", at)
            if entry.pc_type == PCType.INC and fre.start > entry.size:
                raise CorruptError(f"FDE {index}: FRE start {fre.start:#x} beyond the function "
                                   f"size {entry.size:#x}", at)
            previous = fre.start
            starts.append(fre.start)
            fres.append(fre)
        rows: list[FrameRow | None] = [None] * len(fres)
        result = (starts, fres, rows, entry)
        self._rows[index] = result
        return result

    def find_fre(self, pc: int) -> FrameRow | None:
        """The rules for ``pc``, or ``None`` when the section has no information for it."""
        position = bisect_right(self._starts, pc) - 1
        if position < 0:
            return None
        index = position if self._order is None else self._order[position]
        cached = self._rows.get(index)
        if cached is None:
            cached = self._function_rows(index)
        starts, fres, rows, entry = cached
        offset = pc - entry.start
        if offset >= entry.size:
            return None
        if entry.rep_size and entry.pc_type == PCType.MASK:
            offset %= entry.rep_size
        k = bisect_right(starts, offset) - 1
        if k < 0:
            return None
        row = rows[k]
        if row is None:
            row = self.make_row(entry, k, fres[k])
            rows[k] = row
        return row

    # --- step 3: decode the rules ------------------------------------------------------

    def _cfa_offset(self, word: int) -> int:
        if self._s390x:
            return word * S390X_CFA_OFFSET_ALIGNMENT - S390X_CFA_OFFSET_ADJUSTMENT
        return word

    def make_row(self, entry: FDEEntry, k: int, fre: FRE) -> FrameRow:
        """The rules of FRE ``k`` of ``entry`` (raises CorruptError if its words do not form rules)."""
        flex = entry.fde_type == FDEType.FLEX
        signal = bool(entry.info & INFO_SIGNAL_BIT) and self._reader.header.version == VERSION_3
        common = dict(fde_index=entry.index, fre_index=k, func_start=entry.start,
                      func_size=entry.size, row_start=fre.start, ra_mangled=fre.mangled_ra,
                      pauth_key_b=entry.pauth_key_b, signal=signal, flex=flex)
        if not fre.words:
            return FrameRow(cfa=RETAIN, ra=RETAIN, fp=RETAIN, outermost=True, **common)  # type: ignore[arg-type]
        if flex:
            cfa, ra, fp = self._flex_rules(entry, fre)
        else:
            cfa, ra, fp = self._default_rules(entry, fre)
        return FrameRow(cfa=cfa, ra=ra, fp=fp, **common)  # type: ignore[arg-type]

    def _fixed_or_retain(self, fixed: int) -> Rule:
        return Rule(RuleKind.CFA, fixed, deref=True) if fixed else RETAIN

    def _default_rules(self, entry: FDEEntry, fre: FRE) -> tuple[Rule, Rule, Rule]:
        words = fre.words
        base = self._sp if fre.base_reg == BaseReg.SP else self._fp
        cfa = Rule(RuleKind.REGISTER, self._cfa_offset(words[0]), base)
        position = 1
        if self._fixed_ra:
            ra = self._fixed_or_retain(self._fixed_ra)
        elif len(words) > position:
            ra = self._saved_value(words[position])
            position += 1
        else:
            ra = RETAIN
        if self._fixed_fp:
            fp = self._fixed_or_retain(self._fixed_fp)
        elif len(words) > position:
            fp = self._saved_value(words[position])
            position += 1
        else:
            fp = RETAIN
        if position != len(words):
            raise CorruptError(f"FDE {entry.index}: FRE with {len(words)} data words, "
                               f"{len(words) - position} more than its rules use", entry.offset)
        return cfa, ra, fp

    def _saved_value(self, word: int) -> Rule:
        if word == 0:
            return RETAIN  # s390x "not saved" padding word
        if self._v2_s390x and word & 1:
            return Rule(RuleKind.REGISTER, 0, word >> 1)
        return Rule(RuleKind.CFA, word, deref=True)

    def _flex_rule(self, control: int, offset: int) -> Rule:
        deref = bool(control & FLEX_DEREF_P)
        if control & FLEX_REG_P:
            return Rule(RuleKind.REGISTER, offset, control >> FLEX_REGNUM_SHIFT, deref)
        if not deref and offset == 0:
            return RETAIN
        return Rule(RuleKind.CFA, offset, deref=deref)

    def _flex_rules(self, entry: FDEEntry, fre: FRE) -> tuple[Rule, Rule, Rule]:
        words = fre.words
        if len(words) < 2:
            raise CorruptError(f"FDE {entry.index}: flexible FRE with {len(words)} data word(s)",
                               entry.offset)
        control, offset = words[0], words[1]
        if not control & FLEX_REG_P:
            raise CorruptError(f"FDE {entry.index}: flexible CFA rule without a base register",
                               entry.offset)
        cfa = Rule(RuleKind.REGISTER, self._cfa_offset(offset), control >> FLEX_REGNUM_SHIFT,
                   bool(control & FLEX_DEREF_P))
        position = 2
        ra = self._fixed_or_retain(self._fixed_ra)
        if position < len(words):
            if words[position] == 0:
                position += 1  # RA padding: no RA rule
            elif position + 1 < len(words):
                ra = self._flex_rule(words[position], words[position + 1])
                position += 2
        fp = self._fixed_or_retain(self._fixed_fp)
        if position + 1 < len(words):
            fp = self._flex_rule(words[position], words[position + 1])
            position += 2
        if position != len(words):
            raise CorruptError(f"FDE {entry.index}: flexible FRE with {len(words)} data words "
                               "that do not form CFA/RA/FP rules", entry.offset)
        return cfa, ra, fp


def reader_lookup(reader: SFrameReader) -> SFrameLookup:
    """The (cached) lookup object of a reader."""
    return reader.lookup()


__all__ = ["RETAIN", "FrameRow", "Rule", "RuleKind", "SFrameLookup", "reader_lookup"]
