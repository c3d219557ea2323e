"""Compare a file's SFrame section with its DWARF CFI at every row boundary of either.

The CFI side is the SFrame that gas's rules make of it (:mod:`.section`), so
the comparison is between what the file says and what its CFI says, in the
terms SFrame can express. Functions are matched by (start, size) in order
(relocatable objects have several functions at the same offset of different
sections); rows are compared as recovery rules (CFA, RA, FP, outermost), not
as bytes, so a different but equivalent encoding is no disagreement.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

from ..elf import ElfImage
from ..format.constants import F_FDE_FUNC_START_PCREL, PCType
from ..format.decode import FDEEntry, SFrameReader
from ..format.encode import encode
from ..format.lookup import FrameRow, RuleKind, SFrameLookup
from .section import generate


@dataclass(slots=True, frozen=True)
class Disagreement:
    pc: int
    fde: int
    message: str


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


def compare_with_cfi(image: ElfImage, sframe: bytes, address: int) -> tuple[list[Disagreement],
                                                                          list[str]]:
    """Disagreements between ``sframe`` (at ``address``) and the file's CFI, and notes
    (functions that only one side describes)."""
    ours = SFrameReader(sframe, address)
    generated = generate(image, version=3, address=address)
    theirs = SFrameReader(encode(generated.section), address)
    by_range: dict[tuple[int, int], list[FDEEntry]] = defaultdict(list)
    for entry in theirs.fdes():
        by_range[(entry.start, entry.size)].append(entry)
    skipped = {(start, size): reason for start, size, reason in generated.skipped}
    disagreements: list[Disagreement] = []
    notes = [f".eh_frame entry not readable, so not compared: {error}"
             for error in generated.cfi_errors]
    our_lookup: SFrameLookup | None = None  # built at the first matching function
    their_lookup: SFrameLookup | None = None
    for entry in ours.fdes():
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
                    f"SFrame says {_describe(mine)}; CFI says {_describe(cfi)}"))
    return disagreements, notes
