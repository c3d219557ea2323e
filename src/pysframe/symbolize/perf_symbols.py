"""The symbols perf takes from one ELF symbol table, and perf's choice among them, as
columns (numpy) rather than one object per symbol.

A first run builds the table of every binary a recording names: cc1's 28k symbols took
113 ms as a record each, sorted and compared, 31 ms as columns. Only the names that need
looking at are decoded: those at an address several symbols share (perf's choice compares
names), and those that are not plain ASCII (decoded with replacement). The rules are
:mod:`.perf_rules`', the same as the lists reading's (:mod:`.symbol_lists`), and
tests/test_symbol_columns.py holds the two equal; the table comes out as a cache entry's
bytes (:mod:`.table_bytes`), the layout a warm run reads in place. Used only where numpy
is loaded already (a batch run): importing it takes longer than reading most tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..elf import ElfImage
from ..elf.headers import (
    BINDING_NAMES,
    LAST_ADDRESS,
    SHN_LORESERVE,
    STT_NOTYPE,
)
from .perf_rules import TAKEN_KINDS, UNSEEN, better, last_end, symbol_section, taken_sections
from .table_bytes import entry_of


def _dtype(wide: bool, order: str) -> np.dtype[np.void]:
    fields = (["name", "info", "other", "shndx", "value", "size"] if wide
              else ["name", "value", "size", "info", "other", "shndx"])
    word = f"{order}u{8 if wide else 4}"
    kinds = {"name": f"{order}u4", "info": "u1", "other": "u1", "shndx": f"{order}u2",
             "value": word, "size": word}
    return np.dtype([(field, kinds[field]) for field in fields])


class PerfSymbols:
    """Symbols in file order: ``starts``, ``ends`` (uint64), ``bindings`` (index into
    ``BINDING_NAMES``) and each name's ``at``/``size`` in ``blob``."""

    __slots__ = ("at", "bindings", "blob", "ends", "sizes", "starts")

    def __init__(self, starts: np.ndarray, ends: np.ndarray, bindings: np.ndarray,
                 at: np.ndarray, sizes: np.ndarray, blob: bytes) -> None:
        self.starts, self.ends, self.bindings = starts, ends, bindings
        self.at, self.sizes, self.blob = at, sizes, blob

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, index: int) -> str:
        at = int(self.at[index])
        return self.blob[at:at + int(self.sizes[index])].decode("utf-8", "replace")

    def only(self, keep: np.ndarray) -> PerfSymbols:
        """The symbols where ``keep`` (a mask or indexes) says so."""
        return PerfSymbols(self.starts[keep], self.ends[keep], self.bindings[keep],
                           self.at[keep], self.sizes[keep], self.blob)

    def plus(self, more: Iterable[tuple[int, int, str, int]]) -> PerfSymbols:
        """These symbols, then ``more`` (start, end, name, binding index) after them."""
        added = list(more)
        if not added:
            return self
        names = [name.encode() for _, _, name, _ in added]
        sizes = np.fromiter(map(len, names), np.int64, len(names))
        at = len(self.blob) + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        return PerfSymbols(
            np.concatenate((self.starts, np.array([a[0] for a in added], np.uint64))),
            np.concatenate((self.ends, np.array([min(a[1], LAST_ADDRESS) for a in added],
                                                np.uint64))),
            np.concatenate((self.bindings, np.array([a[3] for a in added], np.uint8))),
            np.concatenate((self.at, at)), np.concatenate((self.sizes, sizes)),
            self.blob + b"".join(names))


def _no_symbols() -> PerfSymbols:
    empty = np.zeros(0, np.uint64)
    return PerfSymbols(empty, empty, np.zeros(0, np.uint8), np.zeros(0, np.int64),
                       np.zeros(0, np.int64), b"")


def perf_symbols(image: ElfImage, section_name: str) -> PerfSymbols:
    """The symbols perf 6.1 takes from ``section_name`` (:mod:`.perf_rules`), in file
    order; none for no such table, or one running past the file."""
    found = symbol_section(image, section_name)
    if found is None:
        return _no_symbols()
    entries, blob = found
    layout, sections = image.header.layout, image.section_headers()
    table = np.frombuffer(entries, _dtype(layout.wide, layout.order))
    taken, labels = taken_sections(image)
    loaded, labelled = np.array([*taken, False]), np.array([*labels, False])
    # Section indexes past the headers (and SHN_* above them) point at the False at the end.
    shndx = np.minimum(table["shndx"].astype(np.int64), len(sections))
    shndx[table["shndx"] >= SHN_LORESERVE] = len(sections)
    kind, visibility = table["info"] & 0xF, table["other"] & 3
    label_ok = labelled[shndx] & ~np.isin(visibility, UNSEEN)
    keep = ((table["shndx"] != 0) & (table["name"] != 0) & loaded[shndx]
            & np.where(kind == STT_NOTYPE, label_ok, np.isin(kind, TAKEN_KINDS)))
    table = table[keep]
    at, sizes = _name_places(blob, table["name"].astype(np.int64))
    if image.machine in ("EM_ARM", "EM_AARCH64"):
        padded = np.frombuffer(blob + b"\0\0\0", np.uint8)
        mapping = ((padded[at] == ord("$")) & np.isin(padded[at + 1], list(b"adtx"))
                   & ((sizes == 2) | (padded[at + 2] == ord("."))) & (sizes >= 2))
        table, at, sizes = table[~mapping], at[~mapping], sizes[~mapping]
    starts = table["value"].astype(np.uint64)
    lengths = table["size"].astype(np.uint64)
    ends = starts + lengths
    ends[ends < starts] = LAST_ADDRESS  # past 2**64: kept as the last address
    binding = table["info"] >> 4
    bindings = np.where(binding <= 2, binding, 0).astype(np.uint8)
    return PerfSymbols(starts, ends, bindings, at, sizes, blob)


def _name_places(blob: bytes, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each name starts and how long it is: up to the next NUL (or the end); an
    offset past the strings is an empty name."""
    nuls = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
    at = np.minimum(offsets, len(blob))
    following = np.searchsorted(nuls, at)
    ends = np.where(following < len(nuls), nuls[np.minimum(following, len(nuls) - 1)]
                    if len(nuls) else len(blob), len(blob))
    return at, ends - at


def chosen(symbols: PerfSymbols, shown: Callable[[str], str] | None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """perf's table of ``symbols``: (starts, ends, indexes of the symbols kept), in address
    order. Empty symbols end where the next one starts (perf's ``symbols__fixup_end``,
    before duplicates go: of several empty symbols at one address only the last one gets
    a size); of several symbols at one address one is kept (``symbols__fixup_duplicate``,
    :func:`.perf_rules.better`)."""

    order = np.argsort(symbols.starts, kind="stable")  # file order kept among equals
    starts, ends = symbols.starts[order], symbols.ends[order]
    if len(starts):
        following = np.empty_like(starts)
        following[:-1] = starts[1:]
        following[-1] = min(last_end(int(starts[-1])), LAST_ADDRESS)
        ends = np.where(starts == ends, following, ends)
    first = np.ones(len(starts), bool)
    first[1:] = starts[1:] != starts[:-1]
    heads = np.flatnonzero(first)
    if len(heads) == len(starts):  # (no two symbols at one address)
        return starts, ends, order
    kept = _kept(symbols, order, starts, ends, heads, shown)
    return starts[heads], ends[kept], order[kept]


def _kept(symbols: PerfSymbols, order: np.ndarray, starts: np.ndarray, ends: np.ndarray,
          heads: np.ndarray, shown: Callable[[str], str] | None) -> np.ndarray:
    """The symbol :func:`.perf_rules.better` keeps at each start (``heads``: where each
    start's symbols begin, in ``order``): the first one that no later one beats. What its
    names are not needed for (whether it has a size, then its binding: weak, local,
    global) is ranked for every symbol at once; the names of those ranked first at an
    address decide the rest, one by one (cc1 has ~5,000 such addresses)."""
    bindings = symbols.bindings[order]  # (indexes into BINDING_NAMES: local, global, weak)
    rank = ((ends > starts) * 4 + (bindings != 2) * 2 + (bindings == 1)).astype(np.int8)
    group_of = np.repeat(np.arange(len(heads)), np.diff(np.append(heads, len(starts))))
    top = np.flatnonzero(rank == np.maximum.reduceat(rank, heads)[group_of])
    bounds = np.searchsorted(group_of[top], np.arange(len(heads) + 1))
    kept = top[bounds[:-1]]  # (the first ranked first: the symbol kept unless names say)
    for group in np.flatnonzero(np.diff(bounds) > 1).tolist():
        tied = top[bounds[group]:bounds[group + 1]].tolist()
        best = _facts(symbols, order, starts, ends, tied[0])
        for i in tied[1:]:
            facts = _facts(symbols, order, starts, ends, i)
            if not better(best, facts, shown):
                best, kept[group] = facts, i
    return kept


def _facts(symbols: PerfSymbols, order: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           i: int) -> tuple[bool, str, str]:
    original = int(order[i])
    return (bool(ends[i] > starts[i]), BINDING_NAMES[symbols.bindings[original]],
            symbols.name(original))


def chosen_names(symbols: PerfSymbols, shown: Callable[[str], str] | None) -> dict[int, str]:
    """Start -> name of perf's table of ``symbols``."""
    starts, _, kept = chosen(symbols, shown)
    return {int(start): symbols.name(int(index)) for start, index in zip(starts, kept,
                                                                          strict=True)}


def chosen_entry(symbols: PerfSymbols, shown: Callable[[str], str] | None) -> bytes:
    """perf's table of ``symbols`` as a cache entry's bytes (:mod:`.table_bytes`)."""
    starts, ends, kept = chosen(symbols, shown)
    at, sizes = symbols.at[kept], symbols.sizes[kept]
    placed = np.cumsum(sizes)
    offsets = np.concatenate(([0], placed)).astype(np.uint32)
    names = np.frombuffer(symbols.blob, np.uint8)[
        np.repeat(at - (placed - sizes), sizes) + np.arange(int(placed[-1]) if len(placed)
                                                            else 0)].tobytes()
    if not names.isascii():  # the names as decoded (with replacement) and encoded again
        texts = [symbols.name(int(index)).encode() for index in kept]
        names = b"".join(texts)
        offsets = np.concatenate(([0], np.cumsum([len(text) for text in texts],
                                                 dtype=np.int64))).astype(np.uint32)
    return entry_of(starts.tobytes(), ends.tobytes(), offsets.tobytes(), names)
