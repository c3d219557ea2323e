"""Stack memory as the tracer sees it: 8-byte words read at addresses.

:class:`StackReader` is the one thing the tracer asks of memory. Three sources
provide it: :class:`StackMemory` (the stack copy of a perf sample),
``sources.core.CoreMemory`` (a core's PT_LOAD segments) and
``sources.live.ProcessMemory`` (``/proc/PID/mem``). The last two live in an
earlier stage and satisfy the protocol structurally, without importing it (``cli.stack``,
which walks them, checks that statically).
"""

from __future__ import annotations

import struct

from ..records import Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_U64 = struct.Struct("<Q")
_U64_BE = struct.Struct(">Q")


class StackReader(Protocol):
    """Reads the 8-byte word at ``address``: its value, or ``None`` where it is not readable."""

    def read(self, address: int) -> int | None: ...


class StackMemory:
    """The bytes of a thread's stack copied at ``base`` (e.g. perf's STACK_USER)."""

    __slots__ = ("_reader", "base", "big_endian", "data", "end", "unpack_from")

    def __init__(self, base: int, data: memoryview | bytes, big_endian: bool = False) -> None:
        self.base = base
        self.data = data
        self.end = base + len(data)
        self.big_endian = big_endian
        self._reader = _U64_BE if big_endian else _U64
        #: The word reader, for callers that read inline (the tracer's hot loop).
        self.unpack_from = self._reader.unpack_from

    def read(self, address: int) -> int | None:
        offset = address - self.base
        if offset < 0 or address + 8 > self.end:
            return None
        return int(self._reader.unpack_from(self.data, offset)[0])


#: Readers of two words ``gap`` bytes apart, by (big-endian, gap) (see :func:`pair_reader`).
_PAIRS: dict[tuple[bool, int], struct.Struct] = {}


def pair_reader(big_endian: bool, gap: int) -> Callable[[bytes | memoryview, int],
                                                        tuple[int, ...]]:
    """What reads the 8-byte word at an offset and the one ``gap`` bytes (8 or more) after
    it in one call: a frame's saved FP and its return address, read by the tracer's hot
    loop (~85 ns against ~135 for two reads)."""
    made = _PAIRS.get((big_endian, gap))
    if made is None:
        made = _PAIRS[big_endian, gap] = struct.Struct(
            (">" if big_endian else "<") + f"Q{gap - 8}xQ")
    return made.unpack_from
