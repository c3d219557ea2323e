"""The symbols perf takes from one ELF symbol table, and perf's choice among them, as
parallel lists: the reading of a run that has not loaded numpy (a small recording's first
run, ``sframe stack``), where :mod:`.perf_symbols` reads columns with numpy.

A record per symbol (:class:`.symbols.Symbol`, sorted and compared) took ~16 ms of the
Lua fixture's first run for libc's 8,113 debug symbols; here a 64-bit little-endian table
is read as three columns of words at once (``memoryview.cast``), the symbols perf skips
are dropped from those integers, and only the names that need looking at are decoded:
those at an address several symbols share (perf's choice compares them) and those that
are not plain ASCII (decoded with replacement, as the other readings do). The rules are
the columns' ones, and tests/test_symbol_columns.py holds the readings equal; the table
comes out as a cache entry's bytes (:mod:`.table_bytes`), the layout a warm run reads.
"""

from __future__ import annotations

import struct
import sys
from itertools import accumulate, compress

from ..elf import ElfImage
from ..elf.headers import (
    BINDING_NAMES,
    LAST_ADDRESS,
    SHN_LORESERVE,
    STT_NOTYPE,
)
from .perf_rules import (
    TAKEN_KINDS,
    UNSEEN,
    better,
    last_end,
    name_first,
    symbol_section,
    taken_sections,
)
from .table_bytes import entry_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

class SymbolLists:
    """Symbols in file order: ``starts``, ``ends``, ``bindings`` (index into
    ``BINDING_NAMES``) and ``names`` (bytes, as in the string table)."""

    __slots__ = ("bindings", "ends", "names", "starts")

    def __init__(self, starts: list[int], ends: list[int], bindings: list[int],
                 names: list[bytes]) -> None:
        self.starts, self.ends, self.bindings, self.names = starts, ends, bindings, names

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, index: int) -> str:
        return self.names[index].decode("utf-8", "replace")

    def plus(self, more: Iterable[tuple[int, int, str, int]]) -> SymbolLists:
        """These symbols, then ``more`` (start, end, name, binding index) after them."""
        added = list(more)
        return SymbolLists(self.starts + [start for start, _, _, _ in added],
                           self.ends + [min(end, LAST_ADDRESS) for _, end, _, _ in added],
                           self.bindings + [binding for _, _, _, binding in added],
                           self.names + [name.encode() for _, _, name, _ in added])


def _no_symbols() -> SymbolLists:
    return SymbolLists([], [], [], [])


def symbol_lists(image: ElfImage, section_name: str) -> SymbolLists:
    """The symbols perf 6.1 takes from ``section_name`` (:mod:`.perf_rules`), in file
    order; none for no such table, or one running past the file."""
    section = symbol_section(image, section_name)
    if section is None:
        return _no_symbols()
    entries, string_table = section
    name_at, keys, values, lengths = _columns(image, entries)
    loaded, labelled = taken_sections(image)
    count = min(len(loaded), SHN_LORESERVE)
    # Whether perf takes a symbol depends on its section, kind and visibility alone (and a
    # name): decided once per such key (libc's 10,015 debug symbols have a few dozen).
    accepted = {key: _taken(key, count, loaded, labelled) for key in set(keys)}
    taken = list(map(accepted.__getitem__, keys))
    _drop_unnamed(taken, name_at)
    # (a NUL after the strings: a name runs to the next NUL; one past the strings is empty)
    strings = string_table + b"\0"
    find = strings.find
    names = [strings[at:find(b"\0", at)] for at in compress(name_at, taken)]
    starts = list(compress(values, taken))
    # (sums made in C, clamped only when one passes the last address: a hostile size)
    ends = list(map(int.__add__, starts, compress(lengths, taken)))
    if ends and max(ends) > LAST_ADDRESS:
        ends = [min(end, LAST_ADDRESS) for end in ends]
    bindings = [binding if (binding := key >> 4 & 0xF) <= 2 else 0
                for key in compress(keys, taken)]
    found = SymbolLists(starts, ends, bindings, names)
    if image.machine in ("EM_ARM", "EM_AARCH64"):
        return _without_mapping_symbols(found)
    return found


def _taken(key: int, count: int, loaded: list[bool], labelled: list[bool]) -> bool:
    """Whether perf takes a named symbol whose ``key`` (see :func:`_columns`) is this."""
    shndx, kind = key >> 16, key & 0xF
    return bool(shndx != 0 and shndx < count and loaded[shndx] and (
        (labelled[shndx] and (key >> 8) & 3 not in UNSEEN) if kind == STT_NOTYPE
        else kind in TAKEN_KINDS))


def _drop_unnamed(taken: list[bool], name_at: list[int]) -> None:
    """Symbols without a name (string offset 0) are not taken."""
    at = -1
    while True:
        try:
            at = name_at.index(0, at + 1)
        except ValueError:
            return
        taken[at] = False


def _columns(image: ElfImage, entries: bytes
             ) -> tuple[list[int], list[int], list[int], list[int]]:
    """(name offset, key, value, size) of each entry, the key a symbol's info, other and
    section index: info | other << 8 | shndx << 16 (a 64-bit entry's second 32-bit word as
    this machine reads it)."""
    layout = image.header.layout
    if layout.wide and layout.order == "<" and sys.byteorder == "little":
        halves, words = memoryview(entries).cast("I"), memoryview(entries).cast("Q")
        return (halves[0::6].tolist(), halves[1::6].tolist(), words[1::3].tolist(),
                words[2::3].tolist())
    name_at, keys, values, sizes = [], [], [], []
    for fields in layout.symbol.iter_unpack(entries):
        if layout.wide:
            name, info, other, shndx, value, size = fields
        else:
            name, value, size, info, other, shndx = fields
        name_at.append(name)
        keys.append(info | other << 8 | shndx << 16)
        values.append(value)
        sizes.append(size)
    return name_at, keys, values, sizes


def _without_mapping_symbols(symbols: SymbolLists) -> SymbolLists:
    """ARM's mapping symbols ($a, $d, $t, $x, alone or with a dot after) left out: they are
    not symbols."""
    keep = [not (name[:1] == b"$" and name[1:2] in (b"a", b"d", b"t", b"x")
                 and name[2:3] in (b"", b".")) for name in symbols.names]
    return SymbolLists(list(compress(symbols.starts, keep)), list(compress(symbols.ends, keep)),
                       list(compress(symbols.bindings, keep)),
                       list(compress(symbols.names, keep)))


def chosen(symbols: SymbolLists, shown: Callable[[str], str] | None
           ) -> tuple[list[int], list[int], list[int]]:
    """perf's table of ``symbols``: (starts, ends, indexes of the symbols kept), in address
    order, as :func:`.perf_symbols.chosen` makes it: empty symbols end where the next one
    starts (the last one page past its page), then of several at one address the one
    :func:`.perf_rules.better` keeps."""
    order = sorted(range(len(symbols)), key=symbols.starts.__getitem__)  # stable
    starts = [symbols.starts[i] for i in order]
    ends = [symbols.ends[i] for i in order]
    following = starts[1:]
    if starts:
        following.append(min(last_end(starts[-1]), LAST_ADDRESS))
    ends = [after if start == end else end
            for start, end, after in zip(starts, ends, following, strict=True)]
    kept_starts: list[int] = []
    kept: list[int] = []  # positions in address order
    group = 0  # where the symbols at the last start begin
    for position, start in enumerate(starts):
        if kept_starts and kept_starts[-1] == start:
            continue
        if position - group > 1:
            kept[-1] = _kept(symbols, order, starts, ends, group, position, shown)
        group = position
        kept_starts.append(start)
        kept.append(position)
    if len(starts) - group > 1:
        kept[-1] = _kept(symbols, order, starts, ends, group, len(starts), shown)
    return kept_starts, [ends[position] for position in kept], [order[p] for p in kept]


def _kept(symbols: SymbolLists, order: list[int], starts: list[int], ends: list[int],
          first: int, end: int, shown: Callable[[str], str] | None) -> int:
    """The position :func:`.perf_rules.better` keeps of ``first`` to ``end`` (one start):
    the first that no later one beats. What needs no name (a size, then the binding:
    weak, local, global) ranks them; only those ranked first compare their names."""
    bindings = symbols.bindings
    if end - first == 2:  # (most groups: two names of one function) ranked in place
        second = first + 1
        a, b = bindings[order[first]], bindings[order[second]]
        rank_a = (ends[first] > starts[first]) * 4 + (a != 2) * 2 + (a == 1)
        rank_b = (ends[second] > starts[second]) * 4 + (b != 2) * 2 + (b == 1)
        if rank_a != rank_b:
            return first if rank_a > rank_b else second
        # Tied ranks: one size and binding, so better() compares the names perf shows.
        return first if name_first(symbols.name(order[first]), symbols.name(order[second]),
                                   shown) else second
    ranks = [(ends[p] > starts[p]) * 4 + (bindings[order[p]] != 2) * 2
             + (bindings[order[p]] == 1) for p in range(first, end)]
    top = max(ranks)
    tied = [first + k for k, rank in enumerate(ranks) if rank == top]
    best = tied[0]
    if len(tied) == 1:  # (two groups of three in libc: no name is decoded)
        return best
    facts = _facts(symbols, order, starts, ends, best)
    for position in tied[1:]:
        other = _facts(symbols, order, starts, ends, position)
        if not better(facts, other, shown):
            best, facts = position, other
    return best


def _facts(symbols: SymbolLists, order: list[int], starts: list[int], ends: list[int],
           position: int) -> tuple[bool, str, str]:
    original = order[position]
    return (ends[position] > starts[position], BINDING_NAMES[symbols.bindings[original]],
            symbols.name(original))


def chosen_names(symbols: SymbolLists, shown: Callable[[str], str] | None) -> dict[int, str]:
    """Start -> name of perf's table of ``symbols``."""
    starts, _, kept = chosen(symbols, shown)
    return {start: symbols.name(index) for start, index in zip(starts, kept, strict=True)}


def chosen_entry(symbols: SymbolLists, shown: Callable[[str], str] | None) -> bytes:
    """perf's table of ``symbols`` as a cache entry's bytes (:mod:`.table_bytes`): names
    that are not UTF-8 as decoded with replacement and encoded again."""
    starts, ends, kept = chosen(symbols, shown)
    names = [symbols.names[index] for index in kept]
    blob = b"".join(names)
    if not blob.isascii():
        names = [name.decode("utf-8", "replace").encode() for name in names]
        blob = b"".join(names)
    offsets = list(accumulate(map(len, names), initial=0))
    return entry_of(_words("Q", starts), _words("Q", ends), _words("I", offsets), blob)


def _words(code: str, values: list[int]) -> bytes:
    """``values`` as words of ``code`` in this machine's order (as an array's bytes: the
    ``array`` module imports ``collections``, ~1-2 ms of the first run that makes a table
    here)."""
    return struct.pack(f"={len(values)}{code}", *values)
