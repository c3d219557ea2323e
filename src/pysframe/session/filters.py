"""Which samples ``script`` and ``report`` keep: perf's ``--pid``, ``--tid``, ``--comms``
and ``--time``, with perf's syntax, learnt by running ``perf script`` 6.1 with them
(tests/test_sample_filters.py compares the two on a recording made there).

- ``--pid``, ``--tid``: comma-separated lists of ids (empty items skipped, so ``''``
  keeps nothing); ``--comms``: of thread names, matched whole. A sample is kept when it
  passes every filter given.
- ``--time START,END``: seconds of the recording's clock, to the nanosecond
  (``12345.678``, ``+12345.``, ``.5``); either side may be empty (or 0): from the first
  sample, to the last; both ends inclusive. Several ranges are separated by whitespace
  and must come in order, apart (``1.5,2 3,4``).
- ``--time`` in percent of the span from the first to the last sample (the times the
  recording's SAMPLE_TIME feature gives, as perf takes them): ``10%/2`` the second tenth,
  ``0%-10%`` a span, lists of one of those forms (``10%/1,10%/3``, ``0%-5%,50%-60%``)
  in any order, or ``30%`` alone (``30%/1``). A boundary is the nearest nanosecond, and a
  span ends one nanosecond before its end boundary (unless that is the last sample), so
  slices side by side share no sample.

perf refuses a few spellings this accepts (trailing blanks); otherwise what perf refuses
("Invalid time string", "problems parsing pid list") is a one-line error here, exit
status 2 (perf prints the message and exits 0).
"""

from __future__ import annotations

import math
import re

from ..errors import PysframeError
from ..records import record_class
from ..sources.perf_records import Sample

#: The end of a range without one.
NO_END = (1 << 64) - 1

_ID = re.compile(r"\s*[+-]?\d+")
_SECONDS = r"\s*\+?(\d*)(?:\.(\d{0,9}))?"
_RANGE = re.compile(rf"{_SECONDS},{_SECONDS}")
_SEPARATOR = re.compile(r"\s+")
_SHARE = r"\s*(\d+(?:\.\d*)?)%\s*"
_SLICE = re.compile(rf"{_SHARE}/\s*(\d+)\s*")
_SPAN = re.compile(rf"{_SHARE}-{_SHARE}")
_ALONE = re.compile(_SHARE)


class FilterError(PysframeError):
    """A filter that cannot be read (the command line is wrong: exit status 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, unreadable=True)


@record_class(frozen=True)
class SampleFilter:
    """The samples to keep; a field left None keeps any."""

    pids: frozenset[int] | None = None
    tids: frozenset[int] | None = None
    comms: frozenset[str] | None = None
    #: Inclusive ranges of sample times, in nanoseconds.
    times: tuple[tuple[int, int], ...] | None = None

    def keeps(self, sample: Sample, comm: str) -> bool:
        """Whether ``sample`` (of a thread named ``comm``) passes every filter."""
        if self.pids is not None and sample.pid not in self.pids:
            return False
        if self.tids is not None and sample.tid not in self.tids:
            return False
        if self.comms is not None and comm not in self.comms:
            return False
        return self.times is None or any(start <= sample.time <= end
                                         for start, end in self.times)


def sample_filter(pid: str | None = None, tid: str | None = None, comms: str | None = None,
                  time: str | None = None, span: tuple[int, int] | None = None
                  ) -> SampleFilter | None:
    """The filter the options give (None: they keep every sample); ``span``: the first and
    last sample times the recording states (for percentages)."""
    if pid is None and tid is None and comms is None and time is None:
        return None
    return SampleFilter(
        None if pid is None else id_list(pid, "--pid"),
        None if tid is None else id_list(tid, "--tid"),
        None if comms is None else frozenset(name for name in comms.split(",") if name),
        None if time is None else time_ranges(time, span))


def id_list(text: str, option: str) -> frozenset[int]:
    """The ids of a comma-separated list (leading blanks allowed, empty items skipped)."""
    items = [item for item in text.split(",") if item]
    wrong = next((item for item in items if not _ID.fullmatch(item)), None)
    if wrong is not None:
        raise FilterError(f"{option} {text!r}: {wrong!r} is not an id")
    return frozenset(int(item) for item in items)


def time_ranges(text: str, span: tuple[int, int] | None) -> tuple[tuple[int, int], ...]:
    """The ranges of a ``--time`` argument (see the module docstring)."""
    if "%" in text:
        if span is None:
            raise FilterError(f"--time {text!r}: the recording does not say when its first "
                              "and last samples were taken (no SAMPLE_TIME feature), so "
                              "percentages have no meaning; give times in seconds")
        return _percent_ranges(text, *span)
    ranges: list[tuple[int, int]] = []
    position = 0
    while True:
        found = _RANGE.match(text, position)
        if found is None:
            raise _invalid(text)
        start = _nanoseconds(found[1], found[2])
        end = _nanoseconds(found[3], found[4]) or NO_END
        if start > end or (ranges and start <= ranges[-1][1]):
            raise _invalid(text, "ranges must be in order and apart")
        ranges.append((start, end))
        position = found.end()
        if position == len(text):
            return tuple(ranges)
        blank = _SEPARATOR.match(text, position)
        if blank is None:
            raise _invalid(text)
        position = blank.end()


def _nanoseconds(seconds: str, fraction: str | None) -> int:
    return int(seconds or 0) * 10**9 + int((fraction or "").ljust(9, "0"))


def _invalid(text: str, why: str = "") -> FilterError:
    detail = f" ({why})" if why else ""
    return FilterError(f"--time {text!r}: not START,END in seconds (either may be empty), "
                       f"ranges apart by blanks, nor percentages{detail}")


def _percent_ranges(text: str, first: int, last: int) -> tuple[tuple[int, int], ...]:
    """Ranges of ``a%/n`` slices or ``a%-b%`` spans (one form per list), or ``a%`` alone."""
    items = text.split(",")
    if len(items) > 1 and not items[-1].strip():
        items.pop()  # perf takes "5%/2," as "5%/2"
    alone = _ALONE.fullmatch(text)
    if alone is not None:
        shares = [_slice(text, float(alone[1]), 1)]
    elif all(_SLICE.fullmatch(item) for item in items):
        shares = [_slice(text, float(found[1]), int(found[2]))
                  for found in map(_SLICE.fullmatch, items) if found is not None]
    elif all(_SPAN.fullmatch(item) for item in items):
        shares = [_span(text, float(found[1]), float(found[2]))
                  for found in map(_SPAN.fullmatch, items) if found is not None]
    else:
        raise _invalid(text)
    return tuple(_boundaries(low, high, first, last) for low, high in shares)


def _slice(text: str, share: float, number: int) -> tuple[float, float]:
    if not 0 < share <= 100 or number < 1 or share * number > 100:
        raise _invalid(text, f"no slice {number} of {share:g}%")
    return share * (number - 1) / 100, share * number / 100


def _span(text: str, low: float, high: float) -> tuple[float, float]:
    if low > 100 or high > 100:
        raise _invalid(text, "more than 100%")
    return low / 100, high / 100


def _boundaries(low: float, high: float, first: int, last: int) -> tuple[int, int]:
    """The times ``low`` and ``high`` (fractions) of the way from ``first`` to ``last``,
    to the nearest nanosecond; the end one before its boundary, unless that is ``last``
    or the range would be empty (perf's rule: slices side by side share no sample)."""
    total = last - first
    start = first + math.floor(low * total + 0.5)
    end = first + math.floor(high * total + 0.5)
    if start < end != last:
        end -= 1
    return start, end
