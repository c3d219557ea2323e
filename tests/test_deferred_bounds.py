"""Deferred samples whose record never comes cost bounded memory (issue 25 item 8), in one
thread and across threads, merged and shown apart."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from pysframe.sources.perf_deferred import (
    MAX_WAITING,
    PERF_CONTEXT_USER_DEFERRED,
    Stitcher,
)
from pysframe.sources.perf_records import CallchainDeferred, Record, Sample

KERNEL = (1 << 64) - 128  # PERF_CONTEXT_KERNEL
#: Enough to show the bound (held whole, they took 0.5 KB each); the note gives a million.
COUNT = 200_000


def never_answered(count: int, threads: int) -> Iterator[Record]:
    """``count`` samples waiting for deferred records that never come, and now and then a
    record of another cookie (so that merging drops the waiting ones)."""
    for index in range(count):
        tid = 100 + index % threads
        yield Sample(offset=index * 64, misc=1, ip=0xFFFFFFFF81000000, pid=tid, tid=tid,
                     time=index, callchain=(KERNEL, 0xFFFFFFFF81000000,
                                            PERF_CONTEXT_USER_DEFERRED, 2 * index + 3))
        if threads > 1 and index % 5000 == 4999:
            yield CallchainDeferred(offset=index * 64 + 8, cookie=1, ips=(0x1000,), pid=tid,
                                    tid=tid, time=index)


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "apart"])
@pytest.mark.parametrize("threads", [1, 8])
def test_unanswered_samples_cost_bounded_memory(merge: bool, threads: int) -> None:
    stitcher = Stitcher(merge)
    tracemalloc.start()
    try:
        delivered = sum(1 for record in stitcher.stitched(never_answered(COUNT, threads))
                        if isinstance(record, Sample))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert delivered == COUNT  # every sample printed (its kernel part)
    assert len(stitcher.missing) == COUNT
    assert stitcher.missing[0].tid in range(100, 100 + threads)  # one kept, for the message
    # MAX_WAITING samples per thread at the most, never the million
    assert peak < 2 * threads * MAX_WAITING * 1_000 + (8 << 20), f"{peak / 2**20:.0f} MiB"
