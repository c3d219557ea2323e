"""An index of half-open address intervals."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Any


class Intervals:
    """Half-open ``[low, high)`` intervals with a payload; the first containing one wins."""

    __slots__ = ("_highs", "_lows", "_max_high", "_payloads")

    def __init__(self, items: list[tuple[int, int, Any]]) -> None:
        items = sorted((item for item in items if item[0] < item[1]), key=lambda i: i[0])
        self._lows = [item[0] for item in items]
        self._highs = [item[1] for item in items]
        self._payloads = [item[2] for item in items]
        self._max_high: list[int] = []
        top = 0
        for high in self._highs:
            top = max(top, high)
            self._max_high.append(top)

    def payloads(self) -> list[Any]:
        return list(self._payloads)

    def containing(self, address: int) -> Iterator[Any]:
        """The payloads of the intervals that contain ``address``, the latest-starting
        first."""
        index = bisect_right(self._lows, address) - 1
        while index >= 0 and self._max_high[index] > address:
            if self._highs[index] > address:
                yield self._payloads[index]
            index -= 1
