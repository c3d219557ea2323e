"""The flat table (:mod:`.flat`) of an on-demand table, kept up to date as its functions
are made.

Every function of the index starts as two rows, a :data:`~.flat.PENDING` row at its
start and a "no rule" row at its end; a function made since the last update has those
two rows replaced by its own flat rows, and nothing else is touched. Rebuilding the
whole table at each update instead went over every function of the index each time a
few were made: a first ``script`` of a system-wide recording (cc1's 40k functions,
~300 updates) spent ~8 s there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ..format.constants import ABI
from ..format.lookup import SFrameLookup
from .flat import (
    KIND_NONE,
    KIND_RARE,
    PENDING,
    FlatTable,
    MaskFunction,
    flatten,
    with_masks_from,
)
from .provider import OnDemand

U64 = npt.NDArray[np.uint64]
#: A made function's flat rows, by its lookup's id (the lookup kept, so ids stay unique).
FunctionMemo = dict[int, tuple[SFrameLookup, FlatTable]]


class OnDemandFlat:
    """The flat table of ``table``: :meth:`update` takes in the functions made since the
    last call. Each function's rows come from ``flatten_function`` (default
    :func:`~.flat.flatten`), once per lookup (``memo``)."""

    def __init__(self, table: OnDemand, abi: ABI, memo: FunctionMemo | None = None,
                 flatten_function: Callable[[SFrameLookup], FlatTable] | None = None) -> None:
        self.table, self.abi = table, abi
        self.memo = memo if memo is not None else {}
        self.flatten_function = flatten_function or (lambda lookup: flatten(lookup, abi))
        self.taken = 0  # functions taken in (table.made_after's count)
        self.flat: FlatTable | None = None
        #: Functions taken in but not spliced into :attr:`flat` yet (see :meth:`words_now`).
        self._unspliced: dict[int, SFrameLookup | None] = {}
        self._overlay: tuple[FlatTable, npt.NDArray[np.int64]] | None = None
        #: Their rows, by position, as a splice places them (MASK words counting from the
        #: start of :attr:`_part_masks`).
        self._parts: dict[int, tuple[U64, U64]] = {}
        self._part_masks: list[MaskFunction] = []
        self._index_starts: U64 = np.zeros(0, np.uint64)
        #: The row where each function's rows begin in :attr:`flat`.
        self._row_of: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self._whole: FlatTable | None = None

    def update(self) -> FlatTable:
        """The flat table as the functions made so far give it."""
        ranges = self.table.index_ranges()  # first: the table may turn out to be whole
        whole = self.table.whole
        if whole is not None or ranges is None:
            if self._whole is None:
                self._whole = (flatten(whole, self.abi) if whole is not None
                               else FlatTable(np.zeros(0, np.uint64), np.zeros(0, np.uint64), []))
            return self._whole
        if self.flat is None:
            self.flat = self._pending(*ranges)
        made = self.table.made_after(self.taken)
        self.taken += len(made)
        if self._unspliced:
            made = [*self._unspliced.items(), *made]
            self._unspliced, self._overlay, self._parts, self._part_masks = {}, None, {}, []
        if made:
            self._splice(sorted(made, key=lambda item: item[0]))
        return self.flat

    def current(self) -> FlatTable:
        """The flat table as last updated, the functions made since not in it (made now
        if there is none yet, or if the table turned whole: :meth:`update`)."""
        if self.flat is None or self.table.index_ranges() is None or self.table.whole is not None:
            return self.update()
        return self.flat

    def words_now(self, pcs: U64) -> U64:
        """``update().lookup(pcs)``, without splicing the functions made since the last
        update: a pc still PENDING there is looked up in its function's own rows, which
        hold the same words over its range. The batch engine asks this at each step that
        met functions not made yet (a first run's hundreds), and splicing a large table
        each time (cc1's: 90k rows) cost more than the steps; the snapshot of the next
        batch takes them all at once (:meth:`update`)."""
        current = self.current()
        if current is not self.flat:  # (the whole table's)
            return current.lookup(pcs)
        for position, lookup in self.table.made_after(self.taken):
            self._unspliced[position] = lookup
            self._parts[position] = self._rows(position, lookup, self._part_masks)
            self._overlay = None
            self.taken += 1
        words = self.flat.lookup(pcs)
        pending = np.flatnonzero(words == PENDING)
        if not pending.size or not self._unspliced:
            return words
        overlay, made = self._made_since()
        positions = np.searchsorted(self._index_starts, pcs[pending], "right") - 1
        at = pending[np.isin(positions, made)]
        words[at] = overlay.lookup(pcs[at])
        return words

    def _made_since(self) -> tuple[FlatTable, npt.NDArray[np.int64]]:
        """The rows of the functions not spliced yet, alone (as a splice would place them),
        and their positions."""
        if self._overlay is None:  # (each function's rows made once: here only joined)
            order = sorted(self._parts)
            parts = [self._parts[position] for position in order]
            self._overlay = (FlatTable(np.concatenate([rows for rows, _ in parts]),
                                       np.concatenate([words for _, words in parts]),
                                       list(self._part_masks)),
                             np.array(order, np.int64))
        return self._overlay

    def _flat_of(self, lookup: SFrameLookup) -> FlatTable:
        """A made function's flat rows (once per lookup: :attr:`memo`)."""
        found = self.memo.get(id(lookup))
        if found is None:
            found = self.memo[id(lookup)] = (lookup, self.flatten_function(lookup))
        return found[1]

    def _pending(self, starts: list[int], ends: list[int]) -> FlatTable:
        """Every function pending: its start (PENDING) and its end (no rule)."""
        count = len(starts)
        self._index_starts = np.array(starts, np.uint64)
        rows = np.empty(2 * count, np.uint64)
        rows[0::2], rows[1::2] = starts, ends
        words = np.empty(2 * count, np.uint64)
        words[0::2], words[1::2] = PENDING, KIND_NONE
        self._row_of = np.arange(0, 2 * count, 2, dtype=np.int64)
        return FlatTable(rows, words, [])

    def _rows(self, position: int, lookup: SFrameLookup | None,
              masks: list[MaskFunction]) -> tuple[U64, U64]:
        """The rows that replace function ``position``'s two (its masks added to
        ``masks``)."""
        assert self.flat is not None
        at = int(self._row_of[position])
        pending = self.flat.starts[at:at + 2]
        if lookup is None:
            return pending, np.array([KIND_NONE, KIND_NONE], np.uint64)
        flat = self._flat_of(lookup)
        if flat.rare_all:
            return pending, np.array([KIND_RARE, KIND_NONE], np.uint64)
        if not flat.masks:  # (no MASK word either: the usual function, left as it is)
            return flat.starts, flat.words
        words = with_masks_from(flat.words, len(masks))
        masks += flat.masks
        return flat.starts, words

    def _splice(self, made: list[tuple[int, SFrameLookup | None]]) -> None:
        """Replace the two rows of each function in ``made`` (by position) with its own."""
        assert self.flat is not None
        old = self.flat
        masks = list(old.masks)
        starts: list[U64] = []
        words: list[U64] = []
        positions = [position for position, _ in made]
        grown: list[int] = []
        copied = 0
        for (position, lookup), at in zip(made, self._row_of[positions].tolist(), strict=True):
            rows, row_words = self._rows(position, lookup, masks)
            starts += [old.starts[copied:at], rows]
            words += [old.words[copied:at], row_words]
            copied = at + 2
            grown.append(len(rows) - 2)
        starts.append(old.starts[copied:])
        words.append(old.words[copied:])
        shift = np.zeros(len(self._row_of) + 1, np.int64)
        shift[np.array(positions, np.int64) + 1] = grown  # (each position once)
        self._row_of = self._row_of + np.cumsum(shift)[:-1]
        self.flat = FlatTable(np.concatenate(starts), np.concatenate(words), masks)


def flatten_on_demand(table: OnDemand, abi: ABI, memo: FunctionMemo | None = None) -> FlatTable:
    """The flat table of an on-demand table as made so far (one :class:`OnDemandFlat`
    update)."""
    return OnDemandFlat(table, abi, memo).update()


__all__ = ["FunctionMemo", "OnDemandFlat", "flatten_on_demand"]
