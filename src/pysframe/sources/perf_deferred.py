"""Deferred user callchains (perf >= 6.19, ``--call-graph fp,defer``), stitched as perf does.

A sample taken in the kernel carries ``[KERNEL, kernel ips..., USER_DEFERRED, cookie]``
(or only the last two): its user part comes later, in a PERF_RECORD_CALLCHAIN_DEFERRED
record of the same thread, written at the thread's return to user space for every sample
of that kernel entry. Merging (perf's default) holds each such sample until the next
deferred record of its thread: a matching cookie replaces ``USER_DEFERRED, cookie``
by ``USER, ips...``; a sample whose record never came (another cookie arrived first,
or the data ended) keeps its kernel part only and is counted in :attr:`missing`. Not
merging (``--no-merge-callchains``) delivers samples and deferred records as they come.

Memory is bounded whatever the file holds: at most :data:`MAX_WAITING` samples wait per
thread (past that the oldest is delivered without its user part, as missing), and of the
missing ones only the count and the first are kept.
"""

from __future__ import annotations

from ..records import replace
from .perf_records import CallchainDeferred, Record, Sample

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Iterable, Iterator

PERF_CONTEXT_USER = (1 << 64) - 512
PERF_CONTEXT_USER_DEFERRED = (1 << 64) - 640
#: perf's attribute flag bit ``defer_callchain``.
FLAG_DEFER_CALLCHAIN = 1 << 38
#: Samples of one thread that may wait for their deferred record (one kernel entry's
#: samples share it: a real entry has a handful).
MAX_WAITING = 4096


class Missing:
    """The samples whose deferred record never came: how many, and the first."""

    __slots__ = ("count", "first")

    def __init__(self) -> None:
        self.count = 0
        self.first: Sample | None = None

    def add(self, sample: Sample) -> None:
        self.count += 1
        if self.first is None:
            self.first = sample

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __getitem__(self, index: int) -> Sample:
        if index != 0 or self.first is None:
            raise IndexError("only the first missing sample is kept")
        return self.first


def deferred_cookie(callchain: tuple[int, ...]) -> int | None:
    """The cookie of a callchain whose user part is deferred, or None."""
    for index, address in enumerate(callchain):
        if address == PERF_CONTEXT_USER_DEFERRED:
            return callchain[index + 1] if index + 1 < len(callchain) else None
    return None


def kernel_part(callchain: tuple[int, ...]) -> tuple[int, ...]:
    """The callchain up to its USER_DEFERRED marker."""
    if PERF_CONTEXT_USER_DEFERRED not in callchain:
        return callchain
    return callchain[:callchain.index(PERF_CONTEXT_USER_DEFERRED)]


class Stitcher:
    """Feeds records through; holds and merges samples whose user part is deferred."""

    def __init__(self, merge: bool = True) -> None:
        # (collections imported here: only a recording that defers callchains has one of
        # these, and a small recording's run imports it for nothing else, ~1.5 ms)
        from collections import deque

        self.merge = merge
        self._queue = deque
        self._held: dict[int, deque[Sample]] = {}
        #: Samples whose deferred record never came (printed with their kernel part).
        self.missing = Missing()
        #: Deferred records that matched no waiting sample (merging only).
        self.unmatched = 0

    def stitched(self, records: Iterable[Record]) -> Iterator[Record]:
        """The records to deliver, in delivery order."""
        for record in records:
            if not self.merge:
                self._note(record)
                yield record
            elif isinstance(record, Sample):
                cookie = deferred_cookie(record.callchain)
                if cookie is None:
                    yield record
                else:
                    waiting = self._held.setdefault(record.tid, self._queue())
                    waiting.append(record)
                    if len(waiting) > MAX_WAITING:
                        yield self._without_user(waiting.popleft())
            elif isinstance(record, CallchainDeferred):
                yield from self._release(record)
            else:
                yield record
        for samples in self._held.values():
            for sample in samples:
                if self.merge:
                    yield self._without_user(sample)
                else:
                    self.missing.add(sample)
        self._held.clear()

    def _note(self, record: Record) -> None:
        """Shown apart: the samples still waiting, to count those whose record never comes."""
        if isinstance(record, Sample) and deferred_cookie(record.callchain) is not None:
            waiting = self._held.setdefault(record.tid, self._queue())
            waiting.append(record)
            if len(waiting) > MAX_WAITING:
                self.missing.add(waiting.popleft())
        elif isinstance(record, CallchainDeferred):
            for sample in self._held.pop(record.tid, ()):
                if deferred_cookie(sample.callchain) != record.cookie:
                    self.missing.add(sample)

    def _release(self, record: CallchainDeferred) -> Iterator[Sample]:
        waiting = self._held.pop(record.tid, ())
        matched = False
        for sample in waiting:
            if deferred_cookie(sample.callchain) == record.cookie:
                matched = True
                chain = (*kernel_part(sample.callchain), PERF_CONTEXT_USER, *record.ips)
                yield replace(sample, callchain=chain)
            else:
                yield self._without_user(sample)
        if not matched:
            self.unmatched += 1

    def _without_user(self, sample: Sample) -> Sample:
        self.missing.add(sample)
        return replace(sample, callchain=kernel_part(sample.callchain))


def defers_callchains(flags: Iterable[int]) -> bool:
    """Whether any of these attribute flags asks for deferred user callchains."""
    return any(flag & FLAG_DEFER_CALLCHAIN for flag in flags)
