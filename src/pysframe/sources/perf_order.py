"""The records of a recording in the order of ``perf script``, with bounded memory.

perf's ordered-events queue sorts records by time as they are read and, at each
FINISHED_ROUND record, delivers those no newer than the newest time seen before the
previous FINISHED_ROUND (:func:`.perf_data.in_time_order` does the same, holding the
records in between). That holds two rounds, a few MB in a real recording; without
FINISHED_ROUND records (a rewritten or hostile file) it would hold every record until the
end, and every page of the file they point into would come back when their stacks are
unwound (measured on a 1.4 GB dwarf recording: 1.7 GB peak RSS, 1.4 GB of it file pages
and 240 MB the 177,000 samples held; 72 MB with its FINISHED_ROUND records).

So :func:`time_ordered` streams like :func:`.perf_data.in_time_order` while what it holds
stays small (:data:`PENDING_BYTES` of user stacks, :data:`PENDING_RECORDS` records), and
otherwise switches to an index: one pass notes each record's time and location (24 bytes
each, against ~8 KB of a dwarf sample in the file) and the time limit of every round, the
order is computed with numpy, and the records are read again in that order, the mapped
pages dropped every few MB read. Records inflated from compressed
records are read from a temporary spill file, the same way.

The order is exactly the streaming one: a record read after round ``a`` (the number of
FINISHED_ROUND records before it) is delivered at the first round ``k >= a`` whose limit
``L[k]`` is no older than its time (at the end if none), and within a delivery by time,
then in file order. The limits never decrease, so ``k = max(a, first k with L[k] >= time)``
and the whole order is a stable sort by (k, time). The records the streaming part already
delivered are the first ones of that order and are not delivered twice.
"""

from __future__ import annotations

import heapq

from .perf_data import FinishedRound, PerfData, Record, Sample
from .perf_inflate import Spill

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)
if TYPE_CHECKING:
    from array import array
    from collections.abc import Iterator
    from typing import Any

#: Streaming gives up past this many bytes of user stacks held (their pages stay mapped)...
PENDING_BYTES = 32 * 2**20
#: ... or this many records held.
PENDING_RECORDS = 1 << 16
#: Records read again per step of the indexed order (their locations as ints at a time).
STEP = 1 << 14
#: The indexed order drops mapped pages after reading this much (see _read_in_order)...
RELEASE_AFTER = 16 * 2**20
#: ... counting the user stacks of samples, and this much for any record.
RECORD_COST = 512


def time_ordered(data: PerfData) -> Iterator[Record]:
    """The records of ``data`` (no FINISHED_ROUND) in the order of ``perf script``."""
    heap: list[tuple[int, int, Record]] = []
    push, pop = heapq.heappush, heapq.heappop
    sequence = delivered = held_bytes = 0
    previous_round_max = round_max = -1
    records = data.records()
    for record in records:
        if isinstance(record, FinishedRound):
            limit = previous_round_max
            while heap and heap[0][0] <= limit:
                popped = pop(heap)[2]
                if isinstance(popped, Sample) and popped.stack is not None:
                    held_bytes -= len(popped.stack)
                delivered += 1
                yield popped
            previous_round_max = round_max
            continue
        time = record.time
        if time > round_max:
            round_max = time
        push(heap, (time, sequence, record))
        sequence += 1
        if isinstance(record, Sample) and record.stack is not None:
            held_bytes += len(record.stack)
        if held_bytes > PENDING_BYTES or len(heap) > PENDING_RECORDS:
            break
    else:
        while heap:
            yield heapq.heappop(heap)[2]
        return
    records.close()
    heap.clear()
    yield from _indexed(data, delivered)


def _indexed(data: PerfData, delivered: int) -> Iterator[Record]:
    """The records of ``data`` in order, but for the first ``delivered``, read again by
    location from an index."""
    spill = Spill()
    try:
        locations, order = _order(data, spill)
        spill.open()
        yield from _read_in_order(data, spill, locations, order[delivered:])
    finally:
        spill.close()


def _order(data: PerfData, spill: Spill) -> tuple[array[int], Any]:
    """(locations, the order to read them in) of every record but FINISHED_ROUND."""
    from array import array  # (here: array imports collections, which a small run needs not)

    import numpy as np

    times, locations, arrivals = array("Q"), array("Q"), array("Q")
    limits = array("Q")  # L[k] of the rounds k whose limit is not -1 (no record before)
    unlimited = 0  # rounds at the start with limit -1
    previous_round_max = round_max = -1
    rounds = 0
    for record in data.scan(spill):
        if isinstance(record, FinishedRound):
            if previous_round_max < 0:
                unlimited += 1
            else:
                limits.append(previous_round_max)
            previous_round_max = round_max
            rounds += 1
            continue
        round_max = max(round_max, record.time)
        times.append(record.time)
        locations.append(record.offset)
        arrivals.append(rounds)
    time_of = np.frombuffer(times, dtype=np.uint64) if times else np.zeros(0, np.uint64)
    first = unlimited + np.searchsorted(np.frombuffer(limits, dtype=np.uint64)
                                        if limits else np.zeros(0, np.uint64), time_of)
    arrival = np.frombuffer(arrivals, dtype=np.uint64) if arrivals else np.zeros(0, np.uint64)
    delivery = np.maximum(arrival, first.astype(np.uint64))
    del first, arrival, arrivals
    return locations, np.lexsort((time_of, delivery))


def _read_in_order(data: PerfData, spill: Spill, locations: array[int],
                   order: Any) -> Iterator[Record]:
    """The records at ``locations`` in ``order``. Every :data:`RELEASE_AFTER` bytes read,
    the mapped pages of the file and of the spill are dropped from our resident set: the
    order may go back and forth over the whole file (records of equal times far apart), so
    no page is known to be done with, but one read again is only read back from the file."""
    import numpy as np

    where = np.frombuffer(locations, dtype=np.uint64)[order]
    record_at = data.record_at
    read = 0
    for start in range(0, len(where), STEP):
        for location in where[start:start + STEP].tolist():
            record = record_at(location, spill)
            if record is None:
                continue
            read += RECORD_COST
            if isinstance(record, Sample) and record.stack is not None:
                read += len(record.stack)
            if read > RELEASE_AFTER:
                data.release_before(len(data.buffer), from_start=True)
                spill.release_before(spill.size, from_start=True)
                read = 0
            yield record
