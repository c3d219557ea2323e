"""Finding the recovery rules for a PC: find the FDE, find the FRE, decode its rules.

The steps follow the Linux kernel's ``kernel/unwind/sframe.c`` (find FDE, read
FRE, recover CFA/RA/FP; every read bounds-checked; unsorted tables and
non-ascending FRE starts are detected), with two caches that make repeated
lookups cheap: the function start addresses as one sorted list (binary search
with :func:`bisect.bisect_right`, built once per section, correct also when the
section is not flagged sorted), and each function's decoded rows, built on
first use. A looked-up row is a shared immutable :class:`FrameRow`.

A lookup is built from a reader, ``SFrameLookup(SFrameReader(data, address))``,
once per section: the reader knows nothing of lookups.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right

from ..enums import IntEnum
from ..records import record_class
from .constants import (
    ABI,
    DWARF_REGS,
    FLEX_DEREF_P,
    FLEX_REG_P,
    FLEX_REGNUM_SHIFT,
    INFO_PC_TYPE_BIT,
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
from .errors import CorruptError, SFrameError
from .model import FDE, FRE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from array import array
    from collections.abc import Sequence


class RuleKind(IntEnum):
    """Where a value (CFA, RA or FP) of the caller comes from."""

    #: The register still holds it (valid only in the topmost frame for RA).
    RETAIN = 0
    #: CFA + offset (then loaded from memory if ``deref``).
    CFA = 1
    #: DWARF register ``regnum`` + offset (then loaded if ``deref``).
    REGISTER = 2


@record_class(frozen=True)
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


@record_class
class FrameRow:
    """The rules that hold for a range of PCs of one function.

    Rows are cached and shared between lookups: treat them as read-only.
    (Not a frozen dataclass because frozen ``__init__`` is several times slower.)
    """

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
    #: First address after the function (func_start + func_size), kept for the hot path.
    func_end: int = 0
    ra_mangled: bool = False
    pauth_key_b: bool = False
    signal: bool = False
    flex: bool = False


def _start_fault(entry: FDEEntry, start: int, previous: int, at: int) -> CorruptError:
    """The error of a row whose start is not above the previous one's or, in a
    PC-incrementing FDE, beyond the function."""
    if start <= previous:
        return CorruptError(f"FDE {entry.index}: FRE start {start:#x} not above the previous "
                            f"one ({previous:#x})", at)
    return CorruptError(f"FDE {entry.index}: FRE start {start:#x} beyond the function size "
                        f"{entry.size:#x}", at)


class SFrameLookup:
    """PC -> :class:`FrameRow` for one section (see the module docstring)."""

    __slots__ = (
        "_bucket_base",
        "_bucket_shift",
        "_buckets",
        "_decoded_rows",
        "_fixed_fp",
        "_fixed_ra",
        "_fixed_ra_rule",
        "_flat",
        "_flat_ends",
        "_flat_pcs",
        "_flat_refs",
        "_flat_rows",
        "_fp",
        "_lookups",
        "_order",
        "_reader",
        "_rows",
        "_s390x",
        "_sp",
        "_starts",
        "_v2_s390x",
        "flat_threshold",
        "made_from",
        "sorted_verified",
    )

    def __init__(self, reader: SFrameReader) -> None:
        self._reader = reader
        #: The FDE a single-function table was just encoded from in this process (set by
        #: its maker): its rows can be read from it, not decoded again.
        self.made_from: FDE | None = None
        h = reader.header
        abi = reader.abi()
        regs = DWARF_REGS[abi]
        self._sp = regs.sp
        self._fp = regs.fp
        self._fixed_fp = h.cfa_fixed_fp_offset
        self._fixed_ra = h.cfa_fixed_ra_offset
        self._fixed_ra_rule = (Rule(RuleKind.CFA, self._fixed_ra, deref=True) if self._fixed_ra
                               else RETAIN)
        self._s390x = abi is ABI.S390X_ENDIAN_BIG
        self._v2_s390x = self._s390x and h.version <= VERSION_2
        starts = reader.fde_starts()
        #: True when the stored order is ascending (what SFRAME_F_FDE_SORTED promises).
        self.sorted_verified = all(a <= b for a, b in itertools.pairwise(starts))
        if self.sorted_verified:
            self._order: list[int] | None = None
            self._starts = starts
        else:
            order = sorted(range(len(starts)), key=starts.__getitem__)
            self._order = order
            self._starts = [starts[i] for i in order]
        #: Per function read so far: its rows' starts, their offsets in the section (each
        #: row decoded when first looked up), the rows made, its FDE.
        self._rows: dict[int, tuple[list[int], list[int], list[FrameRow | None], FDEEntry]] = {}
        # The flat row index (see build_flat_index), built after ``flat_threshold`` lookups.
        self._lookups = 0
        self._decoded_rows = 0
        self.flat_threshold = 4096
        self._flat: tuple[array[int], Sequence[int], list[FrameRow | None], int, int,
                          Sequence[int], int] | None = None
        # (arrays once built: importing ``array`` imports ``collections``, ~1 ms of a
        # ``sframe stack``, which builds none)
        self._flat_pcs: array[int] | None = None
        self._flat_ends: Sequence[int] = ()
        self._flat_refs: Sequence[int] = ()
        self._bucket_base = 0
        self._bucket_shift = 62
        self._buckets: Sequence[int] = (0,)
        self._flat_rows: list[FrameRow | None] = []

    @property
    def reader(self) -> SFrameReader:
        """The section this lookup reads."""
        return self._reader

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

    def _function_rows(self, index: int) -> tuple[list[int], list[int], list[FrameRow | None],
                                                  FDEEntry]:
        cached = self._rows.get(index)
        if cached is not None:
            return cached
        entry, starts, offsets = self._read_function(index)
        # Rows read so far may not exceed the header's count: FDEs sharing FRE data
        # would otherwise make the caches grow with num_fdes x fre_len.
        self._decoded_rows += len(offsets)
        if self._decoded_rows > self._reader.header.num_fres:
            raise CorruptError(f"FDEs claim more than the {self._reader.header.num_fres} FREs "
                               "the header counts", entry.offset)
        rows: list[FrameRow | None] = [None] * len(offsets)
        result = (starts, offsets, rows, entry)
        self._rows[index] = result
        return result

    def _read_function(self, index: int) -> tuple[FDEEntry, list[int], list[int]]:
        """FDE ``index`` and its rows' starts and section offsets, with the checks every
        lookup makes (raises :class:`CorruptError` where they fail): every row read as
        :meth:`~.decode.SFrameReader.read_fre` reads it, its words left for
        :meth:`_row` (a lookup makes one or two rows of a function: decoding all of them
        took twice as long, ~9 against ~4.5 us for the Lua fixture's functions)."""
        entry = self._checked_entry(index)
        starts: list[int] = []
        offsets: list[int] = []
        previous = -1
        mask = entry.info & INFO_PC_TYPE_BIT
        for at, start, _, _ in self._reader.fre_heads(entry):
            if start <= previous or (not mask and start > entry.size):
                raise _start_fault(entry, start, previous, at)
            previous = start
            starts.append(start)
            offsets.append(at)
        return entry, starts, offsets

    def _row(self, entry: FDEEntry, k: int, offsets: list[int], rows: list[FrameRow | None]
             ) -> FrameRow:
        """Row ``k`` of ``entry`` (at ``offsets[k]``), made once and kept in ``rows``."""
        row = self.make_row(entry, k, self._reader.read_fre(entry, offsets[k])[0])
        rows[k] = row
        return row

    def _checked_entry(self, index: int) -> FDEEntry:
        """FDE ``index``, with the checks of its type every lookup makes."""
        entry = self._reader.fde(index)
        if entry.fde_type not in (FDEType.DEFAULT, FDEType.FLEX):
            raise CorruptError(f"FDE {index}: unknown FDE type {entry.fde_type}", entry.offset)
        if entry.pc_type == PCType.MASK and entry.rep_size == 0:
            raise CorruptError(f"FDE {index}: PCMASK FDE with rep_size 0", entry.offset)
        return entry

    def _risky_rows(self, index: int, used: int) -> tuple[FDEEntry, list[tuple[int, int]]]:
        """FDE ``index`` checked as :meth:`_read_function` checks it, from its rows' starts
        and word counts only; and (row, offset) of the rows whose words could fail (all of
        a flexible FDE's, a default one's with more than ``used`` words)."""
        entry = self._checked_entry(index)
        previous = -1
        mask = entry.info & INFO_PC_TYPE_BIT
        everyone = entry.fde_type == FDEType.FLEX
        risky: list[tuple[int, int]] = []
        for k, (at, start, count, _) in enumerate(self._reader.fre_heads(entry)):
            if start <= previous or (not mask and start > entry.size):
                raise _start_fault(entry, start, previous, at)
            previous = start
            if everyone or count > used:
                risky.append((k, at))
        return entry, risky

    def first_fault(self) -> SFrameError | None:
        """The error a lookup somewhere in the section would raise (the first in stored
        order: every function's rows read and made, none kept), or None. A reader that
        drops a table at its first fault, as the kernel does, would drop this one; asked
        up front, the answer does not depend on which PCs happen to be looked up."""
        reader = self._reader
        decoded = 0
        # A default row's rules fail only on words they do not use (make_row): rows
        # within this many words are not made (the check read libc's rows twice as slowly).
        used = 1 + (not self._fixed_ra) + (not self._fixed_fp)
        if reader.plainly_readable(used):
            return None
        try:
            for index in range(reader.num_fdes):
                entry, risky = self._risky_rows(index, used)
                decoded += entry.num_fres
                if decoded > reader.header.num_fres:
                    raise CorruptError(f"FDEs claim more than the {reader.header.num_fres} FREs "
                                       "the header counts", entry.offset)
                for k, at in risky:
                    self.make_row(entry, k, reader.read_fre(entry, at)[0])
        except SFrameError as error:
            return error
        return None

    def find_fre(self, pc: int) -> FrameRow | None:
        """The rules for ``pc``, or ``None`` when the section has no information for it."""
        flat = self._flat
        if flat is not None:
            pcs, ends, rows, base, shift, buckets, last_bucket = flat
            bucket = (pc - base) >> shift
            if bucket < 0:
                return None
            if bucket < last_bucket:
                i = buckets[bucket]
                hi = buckets[bucket + 1]
                if i != hi:  # several rows start in this bucket
                    i = bisect_right(pcs, pc, i, hi + 1) - 1
            else:
                i = len(pcs) - 1
            row = rows[i]
            if row is None:
                if pc >= ends[i]:
                    return None
                return self._flat_row(i, pc)
            if pc >= row.func_end:  # in the gap after the function
                return None
            return row
        self._lookups += 1
        if self._lookups >= self.flat_threshold:
            self.build_flat_index()
        return self.find_fre_stepwise(pc)

    def find_fre_stepwise(self, pc: int) -> FrameRow | None:
        """:meth:`find_fre` through the per-function steps only (no flat index)."""
        position = bisect_right(self._starts, pc) - 1
        if position < 0:
            return None
        index = position if self._order is None else self._order[position]
        cached = self._rows.get(index)
        if cached is None:
            cached = self._function_rows(index)
        starts, offsets, rows, entry = cached
        offset = pc - entry.start
        if offset >= entry.size:
            return None
        if entry.rep_size and entry.pc_type == PCType.MASK:
            offset %= entry.rep_size
        k = bisect_right(starts, offset) - 1
        if k < 0:
            return None
        row = rows[k]
        return row if row is not None else self._row(entry, k, offsets, rows)

    def build_flat_index(self) -> bool:
        """Index every row of the section by absolute start address: one binary search per lookup.

        Functions that cannot be flattened (PCMASK blocks, rows that fail to
        decode) keep one entry that sends lookups to the per-function steps,
        so errors still surface only for PCs in those functions. Returns False
        (and keeps the stepwise lookup) when functions overlap.
        """
        self._lookups = -(1 << 62)  # never try again
        try:
            self._reader.check_fre_total()  # bounds the work below by the section size
        except SFrameError:
            return False
        pcs: list[int] = []
        ends: list[int] = []
        refs: list[int] = []
        previous_end = None
        reader = self._reader
        for position in range(len(self._starts)):
            index = position if self._order is None else self._order[position]
            try:
                entry = reader.fde(index)
            except SFrameError:
                return False
            if previous_end is not None and entry.start < previous_end:
                return False
            previous_end = entry.end
            rows_of = None if entry.pc_type == PCType.MASK else self._scan_row_starts(entry)
            if rows_of is None:
                pcs.append(entry.start)
                ends.append(entry.end)
                refs.append(~index)
                continue
            start = entry.start
            end = entry.end
            reference = index << 16
            for k, row_start in enumerate(rows_of):
                pcs.append(start + row_start)
                ends.append(end)
                refs.append(reference | k)
        # Flat arrays of machine integers: contiguous, so searches do not chase pointers.
        from array import array

        if pcs and not (-(1 << 63) <= pcs[0] and max(ends) < (1 << 63)):
            return False  # addresses outside the signed 64-bit range: keep the stepwise path
        self._flat_ends = array("q", ends)
        self._flat_refs = array("q", refs)
        self._flat_rows = [None] * len(pcs)
        self._build_buckets(pcs)
        self._flat_pcs = array("q", pcs)
        self._flat = (self._flat_pcs, self._flat_ends, self._flat_rows, self._bucket_base,
                      self._bucket_shift, self._buckets, len(self._buckets) - 1)
        if not pcs:
            self._flat = None
        return True

    def _build_buckets(self, pcs: list[int]) -> None:
        """A direct table from address bucket to the last row starting at or before it.

        Binary search over a big array is bound by cache misses; with about four
        buckets per row most lookups need no search at all, the rest search the
        few rows of one bucket.
        """
        from array import array

        if not pcs:
            self._bucket_base, self._bucket_shift, self._buckets = 0, 62, array("q", [0, 0])
            return
        base = pcs[0]
        span = max(pcs[-1] - base, 1)
        shift = 0
        while (span >> shift) > 4 * len(pcs):
            shift += 1
        count = (span >> shift) + 1
        buckets = [0] * (count + 1)
        i = 0
        last = len(pcs) - 1
        for bucket in range(count + 1):
            limit = base + (bucket << shift)
            while i < last and pcs[i + 1] <= limit:
                i += 1
            buckets[bucket] = i
        self._bucket_base, self._bucket_shift, self._buckets = base, shift, array("q", buckets)

    def _scan_row_starts(self, entry: FDEEntry) -> list[int] | None:
        """Start offsets of a function's rows, or ``None`` if they are irregular (left to the
        per-function steps, which raise the precise error when such a PC is looked up)."""
        reader = self._reader
        h = reader.header
        data = reader.buffer
        start_size = (1, 2, 4, 0)[min(entry.fre_type, 3)]
        if not start_size or entry.num_fres > 0xFFFF:
            return None
        big = h.big_endian
        end_limit = h.fres_end
        pos = entry.fres_offset
        starts = []
        previous = -1
        for _ in range(entry.num_fres):
            info_at = pos + start_size
            if info_at >= end_limit:
                return None
            if start_size == 1:
                start = data[pos]
            else:
                start = int.from_bytes(data[pos:info_at], "big" if big else "little")
            info = data[info_at]
            size_code = (info >> 5) & 3
            if size_code == 3 or start <= previous or start > entry.size:
                return None
            pos = info_at + 1 + ((info >> 1) & 0xF) * (1 << size_code)
            if pos > end_limit:
                return None
            starts.append(start)
            previous = start
        return starts

    def _flat_row(self, i: int, pc: int) -> FrameRow | None:
        ref = self._flat_refs[i]
        if ref < 0:
            return self.find_fre_stepwise(pc)  # not flattened: PCMASK or undecodable function
        index, k = ref >> 16, ref & 0xFFFF
        _, offsets, rows, entry = self._function_rows(index)
        row = rows[k]
        if row is None:
            row = self._row(entry, k, offsets, rows)
        self._flat_rows[i] = row
        return row

    # --- step 3: decode the rules ------------------------------------------------------

    def _cfa_offset(self, word: int) -> int:
        if self._s390x:
            return word * S390X_CFA_OFFSET_ALIGNMENT - S390X_CFA_OFFSET_ADJUSTMENT
        return word

    def make_row(self, entry: FDEEntry, k: int, fre: FRE) -> FrameRow:
        """The rules of FRE ``k`` of ``entry`` (raises CorruptError if its words do not form rules)."""
        flex = entry.fde_type == FDEType.FLEX
        outermost = not fre.words
        if outermost:
            cfa = ra = fp = RETAIN
        elif flex:
            cfa, ra, fp = self._flex_rules(entry, fre)
        else:
            cfa, ra, fp = self._default_rules(entry, fre)
        return FrameRow(
            fde_index=entry.index,
            fre_index=k,
            func_start=entry.start,
            func_size=entry.size,
            row_start=fre.start,
            cfa=cfa,
            ra=ra,
            fp=fp,
            outermost=outermost,
            func_end=entry.start + entry.size,
            ra_mangled=fre.mangled_ra,
            pauth_key_b=entry.pauth_key_b,
            signal=bool(entry.info & INFO_SIGNAL_BIT) and self._reader.header.version == VERSION_3,
            flex=flex,
        )

    def _fixed_or_retain(self, fixed: int) -> Rule:
        if fixed == self._fixed_ra:
            return self._fixed_ra_rule
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


class MadeLookup(SFrameLookup):
    """An :class:`SFrameLookup` of a single-function table that is set up (its starts read,
    its fixed rules made) at its first use beyond its reader and ``made_from``: a first
    run makes thousands of functions whose rows the batch engine reads from the FDE they
    were encoded from (``made_from``) and never looks up, and a warm one takes thousands
    from the cache whose flat rows it has kept (~4 us each, of a ~20 us function)."""

    __slots__ = ()

    def __init__(self, reader: SFrameReader, made_from: FDE | None = None) -> None:
        self._reader = reader
        self.made_from = made_from

    def __getattr__(self, name: str) -> object:
        # (only for a slot not set yet: the rest of the set-up, once; it sets every slot
        # before reading it)
        made_from = self.made_from
        SFrameLookup.__init__(self, self._reader)
        self.made_from = made_from
        return object.__getattribute__(self, name)


__all__ = ["RETAIN", "FrameRow", "MadeLookup", "Rule", "RuleKind", "SFrameLookup"]
