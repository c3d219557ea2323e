"""Flat tables (:mod:`.flat`) kept in the private cache, by build id.

Flattening walks every row of a module's SFrame table in Python (libc: ~0.2 s); the
batch engine needs the result at every run. An entry is made from exactly the section
bytes and the ABI it was flattened for (both in its source digest, checked on every
use by :mod:`pysframe.cachedir`, which also verifies the payload's own digest), so a
changed table, a table generated differently or a tampered entry is flattened again,
never trusted. The payload is checked for shape before use (sorted starts, sizes that
add up, mask indices in range); anything else is rebuilt.

An on-demand table's functions (:class:`FunctionRows`) are kept apart, one entry per
binary holding each made function's flat rows under the digest of that function's own
table bytes: rows are a function of those bytes and the ABI alone, so a function made
differently (another generator, another build) is simply not found and is flattened
again. Without it a warm ``script`` of a system-wide recording flattened the ~3,000
functions its recordings had made again at every run (~0.5 s). The workers of one ``-j``
run also take the rows another flattened (:mod:`pysframe.made_exchange`).
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..cache_merge import merge_into
from ..cachedir import blake2b_digest, describe, entry_path, load, store
from ..format.constants import ABI
from ..format.lookup import SFrameLookup
from ..made_exchange import shared
from .flat import CFA_SHIFT, KIND_MASK, FlatTable, MaskFunction, flatten

#: Bumped when the layout of a flat table or of this payload changes.
PAYLOAD_FORMAT = 1
#: Beside the generated tables, one entry per build id and payload format.
KIND = f"sframe/flat.p{PAYLOAD_FORMAT}"
#: The flat rows of on-demand tables' functions, one entry per binary.
FUNCTIONS_KIND = f"sframe/flat-functions.p{PAYLOAD_FORMAT}"
_HEAD = struct.Struct("<IIQQ")  # format, rare_all, rows, masks
_MASK = struct.Struct("<QQQQ")  # start, end, rep_size, rows


def _entry_id(section: memoryview, build_id: bytes | None) -> bytes:
    # No build id (numpy's bundled OpenBLAS: 366k rows, 4.7 s to flatten): the section's
    # own digest names the entry (the source digest checks it anyway).
    if build_id:
        return build_id
    import hashlib  # (here only: it loads OpenSSL, ~2 ms of every batch run's start)

    return hashlib.sha256(section).digest()[:20]


def flat_is_cached(lookup: SFrameLookup, build_id: bytes | None) -> bool:
    """Whether the cache has an entry for ``lookup``'s flat table (not verified: that is
    done when it is read)."""
    path = entry_path(KIND, _entry_id(memoryview(lookup.reader.data), build_id))
    return path is not None and os.path.isfile(path)


def cached_flat(lookup: SFrameLookup, abi: ABI, build_id: bytes | None) -> FlatTable:
    """The flat table of ``lookup``, from the cache when an entry verifies."""
    section = memoryview(lookup.reader.data)
    build_id = _entry_id(section, build_id)
    source = describe(len(section), [section, abi.name.encode(), bytes([PAYLOAD_FORMAT])])
    payload = load(KIND, build_id, source)
    if payload is not None:
        table = _decoded(payload)
        if table is not None:
            return table
    table = flatten(lookup, abi)
    store(KIND, build_id, _encoded(table), source)
    return table


def _encoded(table: FlatTable) -> bytes:
    parts = [_HEAD.pack(PAYLOAD_FORMAT, int(table.rare_all), len(table.starts), len(table.masks)),
             table.starts.astype("<u8").tobytes(), table.words.astype("<u8").tobytes()]
    for mask in table.masks:
        parts.append(_MASK.pack(mask.start, mask.end, mask.rep_size, len(mask.row_starts)))
        parts.append(struct.pack(f"<{len(mask.row_starts)}Q", *mask.row_starts))
        parts.append(struct.pack(f"<{len(mask.words)}Q", *mask.words))
    return b"".join(parts)


def _decoded(payload: bytes) -> FlatTable | None:
    """The table in ``payload``, or None when it is not a well-formed one."""
    try:
        form, rare_all, rows, mask_count = _HEAD.unpack_from(payload)
        if form != PAYLOAD_FORMAT or rare_all > 1:
            return None
        position = _HEAD.size
        if position + 16 * rows > len(payload):
            return None
        starts = np.frombuffer(payload, "<u8", rows, position).astype(np.uint64)
        words = np.frombuffer(payload, "<u8", rows, position + 8 * rows).astype(np.uint64)
        position += 16 * rows
        masks = []
        for _ in range(mask_count):
            start, end, rep_size, count = _MASK.unpack_from(payload, position)
            position += _MASK.size
            row_starts = list(struct.unpack_from(f"<{count}Q", payload, position))
            row_words = list(struct.unpack_from(f"<{count}Q", payload, position + 8 * count))
            position += 16 * count
            masks.append(MaskFunction(start, end, rep_size, row_starts, row_words))
    except (struct.error, ValueError):
        return None
    if position != len(payload) or (rows and bool(np.any(starts[1:] < starts[:-1]))):
        return None
    masked = words[(words & np.uint64(3)) == KIND_MASK] >> np.uint64(CFA_SHIFT)
    if masked.size and int(masked.max()) >= len(masks):
        return None
    return FlatTable(starts, words, masks, bool(rare_all))


#: The payload of function rows: its own format (8-byte aligned throughout, so the rows
#: are read as views of one array), then per function its digest, rows, starts and words.
FUNCTIONS_FORMAT = 2
_FUNCTIONS_HEAD = struct.Struct("<II")  # format, functions
_FUNCTION = struct.Struct("<16sI4x")  # digest of the function's table, rows
#: Every :class:`FunctionRows` made with a cache entry, by (entry, ABI): one per binary.
_OPENED: dict[tuple[bytes, ABI], FunctionRows] = {}


def _function_digest(lookup: SFrameLookup) -> bytes:
    return blake2b_digest(lookup.reader.data, 16)


class FunctionRows:
    """The flat rows of one binary's single-function tables (an on-demand table's made
    functions), from its cache entry when there, flattened and remembered otherwise
    (:meth:`save` keeps the new ones). ``entry_id``: the binary's (None: nothing kept)."""

    def __init__(self, entry_id: bytes | None, abi: ABI) -> None:
        self.entry_id, self.abi = entry_id, abi
        self._source = describe(0, [abi.name.encode(), bytes([FUNCTIONS_FORMAT])])
        self.rows: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._new = False
        if entry_id is not None:
            payload = load(FUNCTIONS_KIND, entry_id, self._source)
            self.rows = _functions_decoded(payload) if payload is not None else {}

    def flat(self, lookup: SFrameLookup) -> FlatTable:
        """The flat table of a single-function ``lookup`` (kept, or another worker's of
        this run, or flattened now)."""
        digest = _function_digest(lookup)
        found = self.rows.get(digest) or self._taken(digest)
        if found is not None:
            return FlatTable(found[0], found[1], [])
        table = flatten(lookup, self.abi)
        if not table.masks and not table.rare_all:  # (PLT blocks and odd tables: few)
            self.rows[digest] = (table.starts, table.words)
            self._new = True
            self._give(digest, table.starts, table.words)
        return table

    def _exchanged(self, digest: bytes) -> bytes:
        return b"rows" + self.abi.name.encode() + digest

    def _taken(self, digest: bytes) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows another worker of this ``-j`` run flattened (see
        :mod:`~pysframe.made_exchange`: this run's own unnamed files, so taken as
        given, in this machine's byte order), now kept here too."""
        exchange = shared()
        if exchange is None:
            return None
        found, data = exchange.take(self._exchanged(digest), 0)
        if not found or data is None or len(data) % 16:
            return None
        rows = np.frombuffer(data, np.uint64).reshape(2, -1)
        self.rows[digest] = (rows[0], rows[1])
        self._new = True
        return rows[0], rows[1]

    def _give(self, digest: bytes, starts: np.ndarray, words: np.ndarray) -> None:
        exchange = shared()
        if exchange is not None:
            exchange.give(self._exchanged(digest), 0, starts.tobytes() + words.tobytes())

    def save(self) -> None:
        """Keep the rows flattened in this run (with the ones another run kept meanwhile)."""
        if not self._new or self.entry_id is None:
            return
        self._new = False

        def merged(payload: bytes | None) -> bytes:
            rows = _functions_decoded(payload) if payload is not None else {}
            rows.update(self.rows)
            return _functions_encoded(rows)

        merge_into(FUNCTIONS_KIND, self.entry_id, self._source, merged)  # (one at a time)


def function_rows(entry_id: bytes | None, abi: ABI) -> FunctionRows:
    """The :class:`FunctionRows` of a binary (one per entry: its cache entry read once),
    saved with the others by :func:`save_function_rows`."""
    if entry_id is None:
        return FunctionRows(None, abi)
    found = _OPENED.get((entry_id, abi))
    if found is None:
        found = _OPENED[(entry_id, abi)] = FunctionRows(entry_id, abi)
    return found


def save_function_rows() -> None:
    """Keep every binary's new function rows (at exit; forked workers call it themselves)."""
    for made in _OPENED.values():
        made.save()


def _functions_encoded(rows: dict[bytes, tuple[np.ndarray, np.ndarray]]) -> bytes:
    parts = [_FUNCTIONS_HEAD.pack(FUNCTIONS_FORMAT, len(rows))]
    for digest, (starts, words) in rows.items():
        parts += [_FUNCTION.pack(digest, len(starts)), starts.astype("<u8").tobytes(),
                  words.astype("<u8").tobytes()]
    return b"".join(parts)


def _functions_decoded(payload: bytes) -> dict[bytes, tuple[np.ndarray, np.ndarray]]:
    """The rows in ``payload`` ({} when it is not well formed: each function's starts
    rising, no PCMASK word, the sizes adding up). The headers are read one by one, the
    rows checked all at once and given as views of the payload."""
    try:
        form, count = _FUNCTIONS_HEAD.unpack_from(payload)
        if form != FUNCTIONS_FORMAT or len(payload) % 8:
            return {}
        digests, firsts, sizes = [], [], []
        position = _FUNCTIONS_HEAD.size
        for _ in range(count):
            digest, size = _FUNCTION.unpack_from(payload, position)
            position += _FUNCTION.size
            digests.append(digest)
            firsts.append(position // 8)
            sizes.append(size)
            position += 16 * size
    except struct.error:
        return {}
    if position != len(payload):
        return {}
    words_of = np.frombuffer(payload, "<u8")
    first, size = np.array(firsts, np.int64), np.array(sizes, np.int64)
    offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    starts = words_of[np.repeat(first, size) + offset]
    rising = starts[1:] >= starts[:-1]
    ends = np.cumsum(size)[:-1]  # where each next function's rows begin
    rising[ends[(ends > 0) & (ends < len(starts))] - 1] = True  # (no order between them)
    if not rising.all() or np.any((words_of[np.repeat(first + size, size) + offset]
                                   & np.uint64(3)) == KIND_MASK):
        return {}
    return {digest: (words_of[at:at + rows], words_of[at + rows:at + 2 * rows])
            for digest, at, rows in zip(digests, firsts, sizes, strict=True)}
