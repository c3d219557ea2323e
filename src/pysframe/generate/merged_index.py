"""The functions of a merged table made on demand: a file's own ``.sframe`` FDEs and the
functions its CFI adds, as the whole merge (:func:`~.cache._valid_table`) would hold them,
decided from address ranges alone.

The whole merge keeps the own table's FDEs, less those in the linker's stub sections when
ld's rules describe the stubs; it adds the CFI's functions whose start no own FDE covers,
ld's stub FDEs and crti/crtn's (each left out where it overlaps a kept own FDE). What
depends on rows (an own FDE the validator would leave out, which sends the whole merge
round again with every function generated) is seen only when a function is made, and
turns the table whole there (:mod:`.on_demand`). That is exact only if every pc such a
round could change lies in an own FDE (whose making turns the table whole first): a
function of the CFI, of ld's or crti/crtn's that overlaps a kept own FDE must lie inside
the own FDEs; where one does not, the index is refused (the whole merge decides).
"""

from __future__ import annotations

from bisect import bisect_right

#: An own FDE's ref in the index is ``~(OWN_REFS + k)`` for own FDE k: below every PLT
#: ref (``~k``, k < 2**32) and every ``.eh_frame`` offset (>= 0).
OWN_REFS = 1 << 32

#: A function's range and ref: (start, end, ref).
Entry = tuple[int, int, int]


def own_ref(number: int) -> int:
    """The index ref of the own table's FDE ``number``."""
    return ~(OWN_REFS + number)


def own_number(ref: int) -> int | None:
    """The own table's FDE an index ref names, or None (a CFI or PLT ref)."""
    return ~ref - OWN_REFS if ref <= ~OWN_REFS else None


def merged_entries(own: list[Entry], cfi: list[Entry], plt: list[Entry], crt: list[Entry],
                   stubs: list[tuple[int, int]], stubs_described: bool) -> list[Entry] | None:
    """The merged table's functions, sorted by start (not checked for overlaps); None when
    a function the merge leaves out for overlapping own FDEs reaches past them.

    ``own``: the own FDEs' ranges (ref: FDE number); ``cfi``: the CFI FDEs' (sizes of
    1 to 2**32-1, none starting in a stub section); ``plt``, ``crt``: ld's stub FDEs and
    crti/crtn's; ``stubs_described``: whether ld's rules give the whole table an FDE in
    a stub section (then the own ones there are dropped)."""
    if not own:  # (a binary without .sframe: nothing to merge with, no overlap to find)
        ordered = sorted(cfi)
        starts = [start for start, _, _ in ordered]
        return sorted(ordered + plt + [entry for entry in crt
                                       if not overlaps(entry, ordered, starts)])
    own = sorted(own)
    own_starts = [start for start, _, _ in own]

    def started(address: int) -> bool:  # an own FDE covers it (whole merge: include)
        at = bisect_right(own_starts, address) - 1
        return at >= 0 and address < own[at][1]

    from_cfi = sorted(entry for entry in cfi if not started(entry[0]))
    cfi_starts = [start for start, _, _ in from_cfi]
    # crt's are left out where one of those overlaps them
    added = from_cfi + plt + [entry for entry in crt
                              if not overlaps(entry, from_cfi, cfi_starts)]

    def in_stub(address: int) -> bool:
        return any(lo <= address < hi for lo, hi in stubs)

    kept = [entry for entry in own if not (stubs_described and in_stub(entry[0]))]
    kept_starts = [start for start, _, _ in kept]
    if any(_reaches_past(entry, kept, kept_starts) for entry in cfi + plt + crt):
        return None
    entries = [(start, end, own_ref(number)) for start, end, number in kept]
    entries += [entry for entry in added if not overlaps(entry, kept, kept_starts)]
    entries.sort()
    return entries


def overlaps(entry: Entry, ranges: list[Entry], starts: list[int]) -> bool:
    """Whether ``entry``'s range overlaps one of ``ranges`` (sorted by start, apart from
    each other; ``starts``: their starts)."""
    at = bisect_right(starts, entry[0]) - 1
    return (at >= 0 and entry[0] < ranges[at][1]) or (
        at + 1 < len(ranges) and ranges[at + 1][0] < entry[1])


def _reaches_past(entry: Entry, ranges: list[Entry], starts: list[int]) -> bool:
    """Whether ``entry``'s range overlaps one of ``ranges`` (as :func:`overlaps`) without
    lying inside their union (as :func:`_inside`). Most of a file's CFI FDEs lie in the
    one own FDE of their function: seen first, without walking the ranges (~0.6 ms of
    the Lua fixture's first run)."""
    at = bisect_right(starts, entry[0]) - 1
    if at >= 0 and entry[1] <= ranges[at][1]:  # (its start in that FDE: starts <= entry[0])
        return False
    return overlaps(entry, ranges, starts) and not _inside(entry, ranges)


def _inside(entry: Entry, ranges: list[Entry]) -> bool:
    """Whether ``entry``'s range lies inside the union of ``ranges`` (sorted by start)."""
    reached = entry[0]
    for start, end, _ in ranges[max(bisect_right(ranges, (entry[0], 1 << 64)) - 1, 0):]:
        if start > reached or reached >= entry[1]:
            break
        reached = max(reached, end)
    return reached >= entry[1]
