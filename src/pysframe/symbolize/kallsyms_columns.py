"""kallsyms' text symbols read with numpy, for a process that has numpy imported already
(the batch pipeline's, and the child it forks to make a first run's kernel entry).

The same table :func:`~.kernel.kallsyms_payload` makes in a process without numpy (the
tests hold the two readers' tables to each other): the kernel's lines (``%px %c %s``)
before the first module's are checked and split as arrays over the text's bytes, the
names never made objects (the entry keeps them as spans of the text, where the reading
in Python joins them); the modules' lines, and anything after them, are read one by one
as there. ~15 ms for 120,000 lines, where the column-at-a-time read in Python takes ~65 ms.
By hand because no library reads kallsyms into arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .perf_rules import last_end
from .table_bytes import spans_entry_parts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from numpy.typing import NDArray

#: Newline, space; the type letters of text symbols (``T t W w``).
_NEWLINE, _SPACE = 0x0A, 0x20
_TEXT_KINDS = np.frombuffer(b"TtWw", np.uint8)
#: Each byte's value as a hex digit (16: not one).
_DIGITS = np.full(256, 16, np.uint8)
for _value, _digit in enumerate(b"0123456789abcdef"):
    _DIGITS[_digit] = _value
for _value, _digit in enumerate(b"ABCDEF", 10):
    _DIGITS[_digit] = _value


def core_symbols(data: bytes, width: int, cut: int
                 ) -> tuple[NDArray[np.uint64], NDArray[np.int64], NDArray[np.int64]] | None:
    """(addresses, where each name starts, where it ends) in ``data`` of the text symbols
    of the lines before ``cut`` (the kernel's own), in file order; None unless every one
    of those lines is an address of ``width`` hex digits, a space, a type letter, a space
    and a name without whitespace, ended by a newline (the caller checked that ``data``
    has no whitespace but spaces, tabs and newlines, and none of its tabs is before
    ``cut``)."""
    if cut <= 0 or data[cut - 1] != _NEWLINE:
        return None
    text = np.frombuffer(data, np.uint8, cut)
    found = text == _NEWLINE  # (one mask for both: each is a page fault a 4 KiB in a child)
    ends = np.flatnonzero(found)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    if ((ends - starts < width + 4).any()
            or np.count_nonzero(np.equal(text, _SPACE, out=found)) != 2 * len(ends)
            or (text[starts + width] != _SPACE).any()
            or (text[starts + width + 2] != _SPACE).any()):
        return None  # (two spaces a line, where they belong: none in a name)
    symbols = np.isin(text[starts + width + 1], _TEXT_KINDS)
    starts, ends = starts[symbols], ends[symbols]
    digits = _DIGITS[sliding_window_view(text, width)[starts]]  # (a row a line)
    if (digits == 16).any():
        return None
    packed = np.zeros((len(starts), 8), np.uint8)  # big-endian, two digits a byte
    packed[:, 8 - width // 2:] = (digits[:, 0::2] << 4) | digits[:, 1::2]
    return packed.view(">u8").ravel().astype(np.uint64), starts + width + 3, ends


def payload_parts(addresses: NDArray[np.uint64], name_starts: NDArray[np.int64],
                  name_ends: NDArray[np.int64], names: bytes
                  ) -> list[bytes | memoryview] | None:
    """The entry of the table perf's rule makes of these size-less symbols (names at
    ``names[name_starts[k]:name_ends[k]]``), as :func:`~.kernel._perf_payload` makes it,
    as its parts (:func:`~.table_bytes.spans_entry_parts`, ``names`` the area): sorted by
    address (stable), the last of each address kept, each ending where the next starts
    and the last one page past its page. None when the last one's end is past 64 bits."""
    if (addresses[1:] < addresses[:-1]).any():
        order = np.argsort(addresses, kind="stable")
        addresses, name_starts, name_ends = (
            addresses[order], name_starts[order], name_ends[order])
    last = np.ones(len(addresses), bool)
    np.not_equal(addresses[1:], addresses[:-1], out=last[:-1])
    addresses, name_starts, name_ends = addresses[last], name_starts[last], name_ends[last]
    end = last_end(int(addresses[-1]))
    if end >> 64:
        return None
    ends = np.empty_like(addresses)
    ends[:-1], ends[-1] = addresses[1:], end
    # (32-bit: the text is under 256 MiB)
    return spans_entry_parts(addresses.data, ends.data, name_starts.astype(np.uint32).data,
                             name_ends.astype(np.uint32).data, names)
