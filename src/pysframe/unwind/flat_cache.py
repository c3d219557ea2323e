"""Flat tables (:mod:`.flat`) kept in the private cache, by build id.

Flattening walks every row of a module's SFrame table in Python (libc: ~0.2 s); the
batch engine needs the result at every run. An entry is made from exactly the section
bytes and the ABI it was flattened for (both in its source digest, checked on every
use by :mod:`pysframe.cachedir`, which also verifies the payload's own digest), so a
changed table, a table generated differently or a tampered entry is flattened again,
never trusted. The payload is checked for shape before use (sorted starts, sizes that
add up, mask indices in range); anything else is rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np

from ..cachedir import describe, entry_path, load, store
from ..format.constants import ABI
from ..format.lookup import SFrameLookup
from .flat import CFA_SHIFT, KIND_MASK, FlatTable, MaskFunction, flatten

#: Bumped when the layout of a flat table or of this payload changes.
PAYLOAD_FORMAT = 1
#: Beside the generated tables, one entry per build id and payload format.
KIND = f"sframe/flat.p{PAYLOAD_FORMAT}"
_HEAD = struct.Struct("<IIQQ")  # format, rare_all, rows, masks
_MASK = struct.Struct("<QQQQ")  # start, end, rep_size, rows


def _entry_id(section: memoryview, build_id: bytes | None) -> bytes:
    # No build id (numpy's bundled OpenBLAS: 366k rows, 4.7 s to flatten): the section's
    # own digest names the entry (the source digest checks it anyway).
    return build_id or hashlib.sha256(section).digest()[:20]


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
