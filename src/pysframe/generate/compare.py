"""Compare a file's SFrame section with its DWARF CFI at every row boundary of either.

The CFI side is the SFrame that gas's rules make of it (:mod:`.section`), so
the comparison is between what the file says and what its CFI says, in the
terms SFrame can express. Functions are matched by (start, size) in order
(relocatable objects have several functions at the same offset of different
sections); rows are compared as recovery rules (CFA, RA, FP, outermost), not
as bytes, so a different but equivalent encoding is no disagreement.

Linker stubs (PLT sections) have no CFI from gas: their rows are compared, pc by pc,
with the FDEs ld wrote for them into the file's own ``.eh_frame`` (:mod:`.stubs`);
only where ``.eh_frame`` has none, with the correct rules of :mod:`.plt`. GNU ld's
x86-64 ``.plt.got`` rule (CFA SP+16 where the stub, a bare jump, has SP+8) is such a
disagreement, reported like gas's wrong rows.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum

from ..elf import ElfImage
from ..format.constants import F_FDE_FUNC_START_PCREL, PCType
from ..format.decode import FDEEntry, SFrameReader
from ..format.encode import encode
from ..format.lookup import FrameRow, RuleKind, SFrameLookup
from .section import PLT_SECTIONS, Generated, generate
from .stubs import stub_cfa_rules


class Kind(Enum):
    """What a disagreement is, decided from the rows themselves (not from the message)."""

    #: Any other difference of CFA, RA or FP rule.
    ROWS = "rows"
    #: GNU ld's rule for a .plt.got stub: CFA SP+16 where the stub (a bare jump reached by
    #: a call) has only the return address on the stack (SP+8).
    PLT_GOT_RULE = "plt.got rule"
    #: The CFI says RA undefined (the outermost frame); the SFrame row does not say so.
    RA_UNDEFINED_UNMARKED = "RA undefined unmarked"
    #: The CFI keeps the RA in a register; the SFrame row says something else.
    RA_IN_REGISTER = "RA in a register"


@dataclass(slots=True, frozen=True)
class Disagreement:
    pc: int
    fde: int
    message: str
    kind: Kind = Kind.ROWS


def _rows(lookup: SFrameLookup, entry: FDEEntry) -> tuple[list[int], list[FrameRow]]:
    reader = lookup.reader
    starts: list[int] = []
    rows: list[FrameRow] = []
    for k, fre in enumerate(reader.fres(entry)):
        starts.append(fre.start)
        rows.append(lookup.make_row(entry, k, fre))
    return starts, rows


def _describe(row: FrameRow | None) -> str:
    if row is None:
        return "no rule"
    if row.outermost:
        return "RA undefined"
    return f"CFA {row.cfa} RA {row.ra} FP {row.fp}{' (mangled RA)' if row.ra_mangled else ''}"


def _key(row: FrameRow | None) -> object:
    if row is None:
        return None
    if row.outermost:
        return "outermost"
    fp = row.fp if row.fp.kind != RuleKind.RETAIN else None
    return (row.cfa, row.ra, fp, row.ra_mangled)


def section_for_comparison(image: ElfImage, raw: bytes, relocated: bytes) -> bytes:
    """The section bytes whose start fields give real function offsets.

    Linked files: as stored. Relocatable objects: relocated; before 2.45 gas already
    wrote PC-relative starts without saying so (no SFRAME_F_FDE_FUNC_START_PCREL),
    so the flag is set on a copy to read them as what they are.
    """
    if image.elf_type != "REL":
        return raw
    data = bytearray(relocated)
    if len(data) > 3:
        data[3] |= F_FDE_FUNC_START_PCREL
    return bytes(data)


def compare_with_cfi(image: ElfImage, sframe: bytes, address: int,
                     generated: Generated | None = None
                     ) -> tuple[list[Disagreement], list[str]]:
    """Disagreements between ``sframe`` (at ``address``) and the file's CFI, and notes
    (functions that only one side describes). ``generated``: the caller's
    ``generate(image, version=3, address=address)``, when it has made it already."""
    ours = SFrameReader(sframe, address)
    if generated is None:
        generated = generate(image, version=3, address=address)
    theirs = SFrameReader(encode(generated.section), address)
    by_range: dict[tuple[int, int], list[FDEEntry]] = defaultdict(list)
    for entry in theirs.fdes():
        by_range[(entry.start, entry.size)].append(entry)
    skipped = {(start, size): reason for start, size, reason in generated.skipped}
    stubs = image.section_ranges(*PLT_SECTIONS)
    stub_rules = stub_cfa_rules(image) if stubs else {}
    disagreements: list[Disagreement] = []
    notes = [f".eh_frame entry not readable, so not compared: {error}"
             for error in generated.cfi_errors]
    our_lookup: SFrameLookup | None = None  # built at the first matching function
    their_lookup: SFrameLookup | None = None
    for entry in ours.fdes():
        if stub_rules and all(entry.start + k in stub_rules for k in range(entry.size)):
            our_lookup = our_lookup or SFrameLookup(ours)
            disagreements += _stub_disagreements(our_lookup, entry, stub_rules, stubs)
            continue
        candidates = by_range.get((entry.start, entry.size))
        if not candidates:
            reason = skipped.get((entry.start, entry.size))
            notes.append(f"FDE {entry.index} at {entry.start:#x}: "
                         + (f"its CFI has no SFrame form ({reason})" if reason
                            else "no CFI describes this function"))
            continue
        other = candidates.pop(0)
        our_lookup = our_lookup or SFrameLookup(ours)
        their_lookup = their_lookup or SFrameLookup(theirs)
        our_starts, our_rows = _rows(our_lookup, entry)
        their_starts, their_rows = _rows(their_lookup, other)
        base = 0 if entry.pc_type == PCType.MASK else entry.start
        for offset in sorted(set(our_starts) | set(their_starts)):
            mine = our_rows[i] if (i := bisect_right(our_starts, offset) - 1) >= 0 else None
            cfi = their_rows[j] if (j := bisect_right(their_starts, offset) - 1) >= 0 else None
            if _key(mine) != _key(cfi):
                disagreements.append(Disagreement(
                    base + offset, entry.index,
                    f"SFrame says {_describe(mine)}; CFI says {_describe(cfi)}",
                    _kind(mine, cfi)))
    return disagreements, notes


def _kind(mine: FrameRow | None, cfi: FrameRow | None) -> Kind:
    """The kind of a difference between two (different) rows."""
    if cfi is not None and cfi.outermost and not (mine is not None and mine.outermost):
        return Kind.RA_UNDEFINED_UNMARKED
    if (cfi is not None and not cfi.outermost and cfi.ra.kind == RuleKind.REGISTER
            and not cfi.ra.deref):
        return Kind.RA_IN_REGISTER
    return Kind.ROWS


def _stub_disagreements(lookup: SFrameLookup, entry: FDEEntry,
                        rules: dict[int, tuple[int, int]], stubs: dict[str, tuple[int, int]]
                        ) -> list[Disagreement]:
    """The runs of pcs of a PLT FDE where its CFA differs from ``.eh_frame``'s rule."""
    out: list[Disagreement] = []
    run: tuple[int, str, bool] | None = None  # (first pc, message, ld's rule) of a run
    for pc in range(entry.start, entry.end):
        row = lookup.find_fre(pc)
        mine = "no rule" if row is None else (
            "RA undefined" if row.outermost else f"CFA {row.cfa}")
        reg, offset = rules[pc]
        theirs = f"CFA r{reg}{offset:+d}"
        message = None if mine == theirs else f"SFrame says {mine}; .eh_frame says {theirs}"
        if run is not None and message != run[1]:
            out.append(_stub_run(entry, run, pc, stubs))
            run = None
        if message is not None and run is None:
            ld_rule = (row is not None and not row.outermost and row.cfa.kind == RuleKind.REGISTER
                       and row.cfa.offset == offset + 8 and row.cfa.regnum == reg)
            run = (pc, message, ld_rule)
    if run is not None:
        out.append(_stub_run(entry, run, entry.end, stubs))
    return out


def _stub_run(entry: FDEEntry, run: tuple[int, str, bool], end: int,
              stubs: dict[str, tuple[int, int]]) -> Disagreement:
    start, message, ld_rule = run
    section = next((name for name, (lo, hi) in stubs.items() if lo <= start < hi), "PLT")
    message += f" ({end - start} bytes of {section})"
    if section == ".plt.got" and ld_rule:
        message += ": GNU ld's .plt.got rule; the stub is a jump reached by a call, with " \
                   "only the return address on the stack"
        return Disagreement(start, entry.index, message, Kind.PLT_GOT_RULE)
    return Disagreement(start, entry.index, message)
