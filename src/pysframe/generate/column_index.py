"""The index of a binary without a ``.sframe`` of its own (:class:`~.function_index.
FunctionIndex`), made from its CFI FDEs read as numpy columns (:mod:`~pysframe.cfi.
fde_columns`): what :func:`~.merged_index.merged_entries` with no own FDE and the
regularity check give, sorted and checked as columns.

Why apart from :mod:`.merged_index`: that one goes through a tuple per FDE, sorted twice
and checked one by one (~35 ms of cc1's 45k FDEs, in each ``-j`` worker of a first run);
here the columns are sorted and checked at once, and only ld's stub FDEs and
crti/crtn's (a handful) are looked at one by one. Used where numpy is loaded already (the
batch engine); tests/test_column_index.py holds the two equal.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .function_index import _LIMIT, FunctionIndex

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
#: A function's range and ref: (start, end, ref).
Entry = tuple[int, int, int]


def column_index(starts: U64, sizes: U64, offsets: I64, ld_rules: list[Entry],
                 crt: list[Entry]) -> FunctionIndex | None:
    """The index of the CFI FDEs (``starts``, ``sizes`` of 1 to 2**32-1, ``.eh_frame``
    ``offsets``), ld's stub FDEs and crti/crtn's (each left out where a CFI FDE overlaps
    it), or None when it is not regular."""
    limit = np.uint64(_LIMIT)
    if bool(np.any(starts >= limit - sizes)):  # an end at 2**62 or past: never regular
        return None
    ends = starts + sizes
    order = np.lexsort((offsets, ends, starts))
    starts, ends, refs = starts[order], ends[order], offsets[order]
    extra = ld_rules + [entry for entry in crt if not _overlaps(entry, starts, ends)]
    if any(not 0 <= start and end < _LIMIT for start, end, _ in extra):
        return None  # (not regular either way)
    if extra:
        starts = np.concatenate((starts, np.array([e[0] for e in extra], np.uint64)))
        ends = np.concatenate((ends, np.array([e[1] for e in extra], np.uint64)))
        refs = np.concatenate((refs, np.array([e[2] for e in extra], np.int64)))
        order = np.lexsort((refs, ends, starts))
        starts, ends, refs = starts[order], ends[order], refs[order]
    if bool(np.any(ends <= starts)) or bool(np.any(ends[:-1] > starts[1:])):
        return None
    return FunctionIndex(starts.tolist(), ends.tolist(), refs.tolist())


def _overlaps(entry: Entry, starts: U64, ends: U64) -> bool:
    """:func:`~.merged_index.overlaps` over sorted columns."""
    at = int(np.searchsorted(starts, np.uint64(entry[0]), side="right")) - 1
    return (at >= 0 and entry[0] < int(ends[at])) or (
        at + 1 < len(starts) and int(starts[at + 1]) < entry[1])


__all__ = ["column_index"]
