"""The functions of an on-demand table's binary (:class:`FunctionIndex`): apart from
:mod:`.on_demand`, which reads it on every run, so that what makes the functions
(:mod:`.function_maker`) names it too without importing that module."""

from __future__ import annotations

from bisect import bisect_right

#: Addresses an index may hold: far from the ends of the signed 64-bit range, where the
#: whole table's placement margin and the flat tables' limits would apply.
_LIMIT = 1 << 62


class FunctionIndex:
    """The functions of a binary's table-to-be, sorted: ``starts``, ``ends`` and ``refs``
    (an ``.eh_frame`` offset, or ``~k`` for the k-th PLT FDE)."""

    __slots__ = ("ends", "refs", "starts")

    def __init__(self, starts: list[int], ends: list[int], refs: list[int]) -> None:
        self.starts, self.ends, self.refs = starts, ends, refs

    def position(self, pc: int) -> int | None:
        """The position of the function covering ``pc``, or None."""
        i = bisect_right(self.starts, pc) - 1
        return i if i >= 0 and pc < self.ends[i] else None

    def regular(self) -> bool:
        """Sorted, no empty or overlapping ranges, addresses inside [0, 2**62)."""
        starts, ends = self.starts, self.ends
        if not starts:
            return True
        if len(ends) != len(starts) or starts[0] < 0 or ends[-1] >= _LIMIT:
            return False
        # Each range is not empty and ends where the next one starts or before. (int's own
        # comparisons, the addresses being ints: the operator module is not imported for
        # them, ~0.2 ms of a `sframe stack`.)
        return not (any(map(int.__le__, ends, starts))
                    or any(map(int.__gt__, ends, starts[1:])))


__all__ = ["FunctionIndex"]
