"""``perf script --no-inline`` text of a chunk the batch pipeline unwound, built from arrays.

The same text as :func:`.perf_script.format_sample` gives sample by sample: each distinct
(layout, printed pc) of the chunk is named once (lines are kept across chunks), each
distinct chain of user frames joined once into a block that every sample with that chain
shares, and the items placed with index arithmetic into one list of the chunk's text
(header, kernel frames, the user frames' block, the truncation marker, the blank line)
and joined once. The deep recording of bench/perf_script.py: 1.9M frame lines in 1,494
distinct chains (~560 in each 4,096 samples); placing every line took ~75 ms of a warm run's
CPU time, and joining them most of the rest. Samples the
scalar tracer unwound are formatted by :func:`.perf_script.format_sample`.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

from ..session.vector import Chunk, Group
from ..sources.perf_arrays import SampleArrays
from ..symbolize.symbolizer import Symbolizer
from ..symbolize.symbols import SymbolTable
from ..unwind.batch import STOPS
from ..unwind.unwinder import Stop
from .perf_script import TRUNCATED, format_sample, frame_line, kernel_lines

_COPY_ENDED = STOPS.index(Stop.COPY_ENDED)


#: Each layout's lines as :class:`SortedLines`, by ``id`` of its lines dict (with it).
LineIndexes = dict[int, tuple[dict[int, str], "SortedLines"]]


def chunk_text(chunk: Chunk, arrays: SampleArrays, symbolizer: Symbolizer,
               kernel: SymbolTable | None, lines_cache: dict[int, dict[int, str]],
               event: str, with_cpu: bool, max_stack: int | None = None,
               indexes: LineIndexes | None = None, name_width: int = 0) -> str:
    """The text of the chunk's samples, in order (at most ``max_stack`` kernel frames
    each; the user frames were cut when unwound). ``indexes``: the layouts' lines as
    sorted arrays, kept across the chunks of ``lines_cache`` (made for this chunk when
    not given). ``event``: its name, right-aligned to ``name_width`` (as
    :func:`~.perf_script.header` aligns it)."""
    if indexes is None:
        indexes = {}
    n = chunk.end - chunk.start
    sizes = np.ones(n, np.int64)  # a scalar sample: its whole text is one item
    kernel_of: dict[int, list[str]] = {}
    placed = []
    scalar = chunk.scalar
    # The samples the scalar tracer unwound (those the batch handed back) are formatted
    # whole, apart.
    handed = np.fromiter(scalar, np.int64, len(scalar))
    chained = arrays.chain_count[chunk.start:chunk.end] != 0
    for group in chunk.groups:
        counts = group.result.count.astype(np.int64)
        truncated = group.result.stops == _COPY_ENDED
        rows = group.rows
        keep = ~np.isin(rows, handed) if len(handed) else np.ones(len(rows), np.bool_)
        extra = np.zeros(len(rows), np.int64)
        for position in np.flatnonzero(chained[rows] & keep).tolist():
            index = int(rows[position])
            lines = kernel_of[index] = _kernel(arrays, chunk.start + index, kernel, max_stack,
                                               lines_cache)
            extra[position] = len(lines)
        sizes[rows[keep]] = (2 + extra + (counts > 0) + truncated)[keep]
        placed.append((group, keep, counts, truncated, extra))
    starts = np.zeros(n, np.int64)
    starts[1:] = np.cumsum(sizes)[:-1]
    # (one item more, "": the text's last newline comes from the join, not from a copy
    # of the whole text with "\n" added)
    items = np.empty(int(sizes.sum()) + 1, dtype=object)
    items[starts + sizes - 1] = ""
    items[-1] = ""
    for index, unwound in chunk.scalar.items():
        items[starts[index]] = format_sample(unwound, symbolizer, lines_cache, kernel,
                                             max_stack, name_width)[:-1]
    for group, keep, counts, truncated, extra in placed:
        _place(items, starts, group, keep, counts, truncated, extra, symbolizer, lines_cache,
               indexes)
    batch_rows = (np.concatenate([group.rows[keep] for group, keep, *_ in placed]) if placed
                  else np.zeros(0, np.int64))
    items[starts[batch_rows]] = _headers(arrays, chunk, batch_rows, event, with_cpu,
                                         name_width)
    for index, lines in kernel_of.items():
        items[starts[index] + 1:starts[index] + 1 + len(lines)] = lines
    return "\n".join(items.tolist())


def _kernel(arrays: SampleArrays, sample: int, kernel: SymbolTable | None,
            max_stack: int | None, lines_cache: dict[int, dict[int, str]]) -> list[str]:
    first = int(arrays.chain_pos[sample]) // 8
    chain = tuple(arrays.words[first:first + int(arrays.chain_count[sample])].tolist())
    return kernel_lines(chain, kernel, max_stack, lines_cache)


def _headers(arrays: SampleArrays, chunk: Chunk, rows: Any, event: str,
             with_cpu: bool, name_width: int) -> list[str]:
    """The header lines of samples ``rows`` (indices in the chunk, an int64 array) of the
    chunk (as perf_script.header makes them; the fields taken from the arrays as lists at
    once, not element by element)."""
    at = rows + chunk.start
    comms = chunk.comms
    times = arrays.time[at]
    cpus = ([" [%03d]" % cpu for cpu in arrays.cpu[at].tolist()] if with_cpu
            else [""] * len(rows))
    # %-formatting over zipped columns (the seconds and microseconds divided by numpy):
    # ~25% less than an f-string per sample.
    line = "%s %5d%s %5d.%06d: %10d " + f"{event:>{name_width}}".replace("%", "%%") + ": "
    return list(map(line.__mod__, zip(map(comms.__getitem__, rows.tolist()),
                                      arrays.tid[at].tolist(),
                                      cpus, (times // 1_000_000_000).tolist(),
                                      (times % 1_000_000_000 // 1000).tolist(),
                                      arrays.period[at].tolist(), strict=True)))


def _place(items: Any, starts: Any, group: Group, keep: Any, counts: Any, truncated: Any,
           extra: Any, symbolizer: Symbolizer, lines_cache: dict[int, dict[int, str]],
           indexes: LineIndexes) -> None:
    """The user frames of one group's samples into ``items``: each sample's lines as one
    item (its chain's block), then its truncation marker. A chain several samples share
    (a hot path: ~560 distinct chains in each 4,096 samples of bench/deep.c) is named and
    joined once (:func:`_chains`), not frame by frame for every sample."""
    result = group.result
    base = starts[group.rows] + 1 + extra
    kept = np.flatnonzero(keep & (counts > 0))
    if kept.size:
        kept_counts = counts[kept]
        width = int(kept_counts.max())
        # Chains are told apart on the frames as unwound (a row's frames past its count
        # are 0, and the count is part of the chain), then only each distinct chain's
        # frames are made printed pcs: not the whole depth-wide matrix.
        unwound = (result.pcs[:, :width] if kept.size == len(counts)
                   else result.pcs[kept, :width])
        chains, chain_of = _chains(unwound, kept_counts)
        rows, columns = np.nonzero(np.arange(width)[None, :] < kept_counts[chains][:, None])
        # Callers print as their return address - 1 (inside the call); frame 0 as it is.
        values = unwound[chains][rows, columns] - (columns > 0).astype(np.uint64)
        lines = _named(values, kept[chains][rows], columns, group, symbolizer, lines_cache,
                       indexes).tolist()
        bounds = np.concatenate(([0], np.cumsum(kept_counts[chains]))).tolist()
        blocks = np.empty(len(chains), dtype=object)
        blocks[:] = ["\n".join(lines[a:b]) for a, b in pairwise(bounds)]
        items[base[kept]] = blocks[chain_of]
    marked = np.flatnonzero(truncated & keep)
    items[base[marked] + (counts[marked] > 0)] = TRUNCATED


def _multipliers(count: int, state: int = 0x5F3A) -> Any:
    """``count`` odd 64-bit constants (splitmix64's outputs, made here rather than by
    ``numpy.random``, whose import costs more than a chunk's text)."""
    mask, out = (1 << 64) - 1, []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) | 1)
    return np.array(out, np.uint64)


#: The multipliers of a chain's frames in its hash (fixed: the text never depends on them).
_MIX = _multipliers(128)


def _chains(frames: Any, counts: Any) -> tuple[Any, Any]:
    """(rows of ``frames`` that each start a distinct chain, in order; each row's index
    among them). Rows are told apart by a hash of their frames, every row then compared
    with the one it was matched to: a row that differs (a collision) is a chain of its
    own."""
    width = frames.shape[1]
    mix = _MIX[:width] if width <= len(_MIX) else np.resize(_MIX, width)
    hashes = (frames * mix).sum(axis=1) + counts.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    matched = first[inverse.reshape(-1)]
    differ = np.flatnonzero((frames != frames[matched]).any(axis=1)
                            | (counts != counts[matched]))
    if differ.size:
        matched[differ] = differ
    chains, chain_of = np.unique(matched, return_inverse=True)
    return chains, chain_of.reshape(-1)


def _named(values: Any, rows: Any, columns: Any, group: Group, symbolizer: Symbolizer,
           lines_cache: dict[int, dict[int, str]], indexes: LineIndexes) -> Any:
    """The frame line of each printed pc ``values`` (of frame ``columns`` of group rows
    ``rows``), as an object array; pcs not named yet in the group's layout named once each
    (by the mapping the unwinder found for them)."""
    result, space = group.result, group.space
    known = lines_cache.setdefault(space.version, {})
    index = SortedLines.of(known, indexes)
    slots, hit = index.find(values)
    if not hit.all():
        missing = np.flatnonzero(~hit)
        new, first = np.unique(values[missing], return_index=True)
        at = missing[first]
        mappings = space.mappings
        for pc, k in zip(new.tolist(), result.mappings[rows[at], columns[at]].tolist(),
                         strict=True):
            if pc not in known:
                known[pc] = frame_line(symbolizer, mappings[k] if k >= 0 else None, pc)
        index = SortedLines.of(known, indexes)
        slots, _ = index.find(values)
    return index.lines[slots]


class SortedLines:
    """A layout's frame lines (printed pc -> line) as a sorted array of pcs and an array of
    their lines: a chunk's frames are looked up at once (``searchsorted``), not sorted
    (``np.unique``) chunk after chunk. Remade when the layout's lines grew (the batch
    names new pcs; the scalar path keeps its lines apart, by return address:
    :func:`~.perf_script.caller_lines_of`)."""

    __slots__ = ("lines", "pcs", "size")

    def __init__(self, known: dict[int, str]) -> None:
        pcs = sorted(pc for pc in known if 0 <= pc < 1 << 64)
        self.pcs = np.array(pcs, np.uint64)
        self.lines = np.empty(len(pcs), dtype=object)
        self.lines[:] = [known[pc] for pc in pcs]
        self.size = len(known)

    @classmethod
    def of(cls, known: dict[int, str], indexes: LineIndexes) -> SortedLines:
        """The index of ``known`` in ``indexes``, (re)made when missing or stale."""
        found = indexes.get(id(known))
        if found is None or found[0] is not known or found[1].size != len(known):
            found = indexes[id(known)] = (known, cls(known))
        return found[1]

    def find(self, values: Any) -> tuple[Any, Any]:
        """Each value's position in the lines (0 where absent) and whether it is there."""
        if not len(self.pcs):
            return np.zeros(len(values), np.int64), np.zeros(len(values), np.bool_)
        slots = np.minimum(np.searchsorted(self.pcs, values), len(self.pcs) - 1)
        return slots, self.pcs[slots] == values
