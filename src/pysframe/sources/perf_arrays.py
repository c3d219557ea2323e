"""A ``--call-graph dwarf`` recording's samples as numpy arrays, in ``perf script`` order.

For the batch pipeline: one pass over the record headers (for a large recording, in two
processes: :mod:`.perf_scan`; the samples are not parsed
one by one: their fields are gathered with numpy from the mapped file, every position
checked against its record's bounds), the few other records parsed as usual, and
perf's round-based time order (see :mod:`.perf_order`) computed on arrays. Only the
common shape is taken: one sampling event, uncompressed records 8-byte aligned, samples
with ip, tid, time, callchain, user registers and stack (cpu, period, ids optional); for
anything else :func:`sample_arrays` returns None and the record-by-record path reads
the file, with its reports of malformed records.

One sampling event, not one event: ``perf record -a --call-graph dwarf`` adds a dummy
event beside the sampled one (its side band), so a system-wide recording has two. Such a
recording is taken when every event's records carry the same trailer and every sample
the same id field (IDENTIFIER, or ID after the same fields), and every sample's id is
the sampling event's; the dummy's side-band records are parsed as the record path
parses them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..records import record_class
from .perf_data import PerfData
from .perf_records import (
    SAMPLE_ADDR,
    SAMPLE_CALLCHAIN,
    SAMPLE_CPU,
    SAMPLE_DATA_SRC,
    SAMPLE_ID,
    SAMPLE_IDENTIFIER,
    SAMPLE_IP,
    SAMPLE_PERIOD,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_STREAM_ID,
    SAMPLE_TID,
    SAMPLE_TIME,
    SAMPLE_WEIGHT,
    EventAttr,
    Record,
    id_word,
)
from .perf_scan import scan

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

REQUIRED = (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CALLCHAIN | SAMPLE_REGS_USER
            | SAMPLE_STACK_USER)
#: Fields after the stack copy (WEIGHT, DATA_SRC) are not read: they move nothing we read.
ALLOWED = (REQUIRED | SAMPLE_ADDR | SAMPLE_CPU | SAMPLE_PERIOD | SAMPLE_ID | SAMPLE_IDENTIFIER
           | SAMPLE_STREAM_ID | SAMPLE_WEIGHT | SAMPLE_DATA_SRC)
#: The 8-byte fields before the callchain, in record order.
_PREFIX = (SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID,
           SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_PERIOD)


@record_class
class SampleArrays:
    """The samples in ``perf script`` order; ``events``: the other records, each with the
    number of samples delivered before it. Offsets are file offsets; ``stack_pos`` and
    ``stack_len`` place each stack copy; ``regs_pos`` the first user register (-1: the
    sample has no user registers or no stack copy: ``plain``)."""

    offset: I64
    misc: npt.NDArray[np.uint16]
    size: I64
    pid: npt.NDArray[np.int32]
    tid: npt.NDArray[np.int32]
    time: U64
    cpu: npt.NDArray[np.uint32]
    period: U64
    ip: U64
    chain_count: I64
    chain_pos: I64
    regs_pos: I64
    stack_pos: I64
    stack_len: I64
    events: list[tuple[int, Record]]
    words: U64
    #: The event every sample is of (:func:`sampling_attr`).
    attr: EventAttr

    def registers(self, positions: tuple[int, ...], start: int, end: int) -> tuple[U64, ...]:
        """The user registers at ``positions`` (indices in the sampled set) of samples
        ``start`` to ``end`` (0 where a sample has none)."""
        regs_pos = self.regs_pos[start:end]
        has = regs_pos >= 0
        index = np.where(has, regs_pos // 8, 0)
        return tuple(np.where(has, self.words[index + k], np.uint64(0)) for k in positions)


def sample_arrays(data: PerfData, split: bool = False) -> SampleArrays | None:
    """The recording's samples as arrays, or None when it is not of the common shape.
    ``split``: a large recording's records are walked in two processes (see
    :mod:`.perf_scan`)."""
    if not data.attrs or data.data_offset % 8 or not any(_takes(a) for a in data.attrs):
        return None
    word = _id_word(data.attrs)
    if word is None:
        return None
    blocks = _Blocks(data, word)
    scanned = scan(data, blocks, split)
    if scanned is None or (blocks.attr is None and len(scanned[0])):
        return None
    offsets, boundaries, others = scanned
    attr = blocks.attr or sampling_attr(data, offsets, word)
    if attr is None or not _takes(attr):
        return None
    return _gathered(data, attr, offsets, boundaries, others, blocks.parts, blocks.words)


def _takes(attr: EventAttr) -> bool:
    sample_type = attr.sample_type
    return sample_type & REQUIRED == REQUIRED and not sample_type & ~ALLOWED


#: The sample_type bits that lay out a non-sample record's sample_id_all trailer, and the
#: fields of a sample before its ID.
_TRAILER_BITS = (SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU
                 | SAMPLE_IDENTIFIER)
_BEFORE_ID = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR


def _id_word(attrs: list[EventAttr]) -> int | None:
    """The word of each sample that names its event (0: one event, nothing to name), when
    the events lay out their trailers alike and every sample has the id at one place:
    the first word (IDENTIFIER) or, as perf requires of several events, ID after the same
    fields. None: the record path tells the events apart."""
    if len(attrs) == 1:
        return 0
    first = attrs[0].sample_type
    if any((attr.sample_type & _TRAILER_BITS, attr.sample_id_all)
           != (first & _TRAILER_BITS, attrs[0].sample_id_all)
           or attr.sample_type & _BEFORE_ID != first & _BEFORE_ID for attr in attrs):
        return None
    return id_word(first)


def sampling_attr(data: PerfData, offsets: I64, word: int) -> EventAttr | None:
    """The event every sample at ``offsets`` is of: the only one, or the one their ids
    (word ``word`` of each) all name. None when they name several (the record path
    tells their samples apart) or an unknown one."""
    if len(data.attrs) == 1:
        return data.attrs[0]
    if not len(offsets):
        return None
    words: U64 = np.frombuffer(data.buffer, "<u8", len(data.buffer) // 8)
    at = offsets // 8
    if np.any((words[at] >> np.uint64(32)) < 8 * (word + 1)):
        return None
    identifiers = words[at + word]
    first = int(identifiers[0])
    attr = next((attr for attr in data.attrs if first in attr.ids), None)
    if attr is None or not np.all(np.isin(identifiers, np.array(attr.ids, np.uint64))):
        return None
    return attr


#: Samples gathered by one numpy pass at most (bounds its temporary arrays).
BLOCK = 2048
_FIELDS = ("misc", "size", "pid_tid", "time", "cpu", "period", "ip", "count", "chain_pos",
           "regs_pos", "stack_pos", "stack_len")


class _Blocks:
    """The fields of the samples, gathered block by block as the header scan passes them
    (while their pages are still mapped: gathered after the scan dropped them, they were
    read into the resident set again, ~40 ms of a 66k-sample recording's 150). The event
    is the one the first sample's id names; every later sample must name it too (as
    :func:`sampling_attr` requires). :attr:`attr` stays None when a sample names another
    or an unknown one, or its record is malformed: then the scan stops (None)."""

    def __init__(self, data: PerfData, word: int) -> None:
        self.data, self.word = data, word
        self.words: U64 = np.frombuffer(data.buffer, "<u8", len(data.buffer) // 8)
        self.attr: EventAttr | None = None
        self.parts: dict[str, list[Any]] = {name: [] for name in _FIELDS}
        self._slot: dict[int, int] = {}
        self._registers = 0

    def gather(self, offsets: I64) -> bool:
        if self.attr is None and not self._choose(offsets):
            return False
        if len(self.data.attrs) > 1 and not self._same_event(offsets):
            self.attr = None
            return False
        for first in range(0, len(offsets), BLOCK):
            block = _block(self.words, offsets[first:first + BLOCK], self._slot,
                           self._registers)
            if block is None:
                self.attr = None
                return False
            for name in _FIELDS:
                self.parts[name].append(block[name])
        return True

    def _choose(self, offsets: I64) -> bool:
        attr = sampling_attr(self.data, offsets[:1], self.word)
        if attr is None or not _takes(attr):
            return False
        self.attr = attr
        sample_type = attr.sample_type
        self._slot = {bit: 1 + index
                      for index, bit in enumerate(b for b in _PREFIX if sample_type & b)}
        self._registers = attr.sample_regs_user.bit_count()
        return True

    def _same_event(self, offsets: I64) -> bool:
        assert self.attr is not None
        at = offsets // 8
        if np.any((self.words[at] >> np.uint64(32)) < 8 * (self.word + 1)):
            return False
        return bool(np.all(np.isin(self.words[at + self.word],
                                   np.array(self.attr.ids, np.uint64))))


def _gathered(data: PerfData, attr: EventAttr, offsets: I64, boundaries: I64,
              others: list[tuple[int, int, Record | None]], parts: dict[str, list[Any]],
              words: U64) -> SampleArrays | None:
    fields = {name: np.concatenate(values) if values else np.zeros(0, np.int64)
              for name, values in parts.items()}
    if any(_time(record) >= 1 << 63 for _, _, record in others if record is not None) or (
            len(offsets) and int(fields["time"].max()) >= 1 << 63):
        return None  # times this large are not a clock's: the record path orders them
    order, events = _order(data, offsets, boundaries, others, fields["time"].astype(np.uint64))
    pick = _picker(order)
    pid_tid = fields["pid_tid"].astype(np.uint64)
    return SampleArrays(
        pick(offsets), pick(fields["misc"]).astype(np.uint16), pick(fields["size"]),
        pick((pid_tid & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)),
        pick((pid_tid >> np.uint64(32)).astype(np.uint32).view(np.int32)),
        pick(fields["time"]).astype(np.uint64), pick(fields["cpu"]).astype(np.uint32),
        pick(fields["period"]).astype(np.uint64), pick(fields["ip"]).astype(np.uint64),
        pick(fields["count"]), pick(fields["chain_pos"]), pick(fields["regs_pos"]),
        pick(fields["stack_pos"]), pick(fields["stack_len"]), events, words, attr)


def _block(words: U64, offsets: I64, slot: dict[int, int], register_count: int
           ) -> dict[str, Any] | None:
    """The fields of the samples at ``offsets``, every position checked against its record
    (None: one is malformed)."""
    at = offsets // 8
    head = words[at]
    size = (head >> np.uint64(32)).astype(np.int64)
    chain = 1 + len(slot)
    if np.any(size < 8 * (chain + 1)):
        return None
    raw_count = words[at + chain]
    if np.any(raw_count > (size // 8).astype(np.uint64)):
        return None
    count = raw_count.astype(np.int64)
    regs = chain + 1 + count
    if np.any(8 * (regs + 2) > size):
        return None
    has_regs = words[at + regs] != 0
    stack_word = regs + 1 + np.where(has_regs, register_count, 0)
    if np.any(8 * (stack_word + 1) > size):
        return None
    raw_stack = words[at + stack_word]
    if np.any(raw_stack > size.astype(np.uint64)):
        return None
    stack_size = raw_stack.astype(np.int64)
    has_stack = stack_size > 0
    if np.any(stack_size % 8 != 0) or np.any(
            has_stack & (8 * (stack_word + 1) + stack_size + 8 > size)):
        return None
    dyn = np.where(has_stack, words[np.where(has_stack, at + stack_word + 1 + stack_size // 8,
                                             0)], np.uint64(0))
    length = np.minimum(dyn, raw_stack).astype(np.int64)
    # No registers, or an empty copy (a thread in execve): the record path's NO_STACK case.
    plain = ~(has_regs & (length > 0))
    zeros = np.zeros(len(at), np.uint64)
    return {
        "offset_end": int((offsets + size).max()) if len(offsets) else 0,
        "misc": (head >> np.uint64(16)) & np.uint64(0xFFFF), "size": size,
        "pid_tid": words[at + slot[SAMPLE_TID]], "time": words[at + slot[SAMPLE_TIME]],
        "cpu": (words[at + slot[SAMPLE_CPU]] & np.uint64(0xFFFFFFFF)
                if SAMPLE_CPU in slot else zeros),
        "period": words[at + slot[SAMPLE_PERIOD]] if SAMPLE_PERIOD in slot else zeros,
        "ip": words[at + slot[SAMPLE_IP]], "count": count, "chain_pos": offsets + 8 * (chain + 1),
        "regs_pos": np.where(plain, -1, offsets + 8 * (regs + 1)),
        "stack_pos": np.where(plain, -1, offsets + 8 * (stack_word + 1)),
        "stack_len": np.where(plain, 0, length),
    }


def _time(record: Record) -> int:
    return int(getattr(record, "time", 0))


def _picker(order: I64) -> Any:
    def pick(values: Any) -> Any:
        return np.ascontiguousarray(values[order])
    return pick


def _order(data: PerfData, offsets: I64, boundaries: I64,
           others: list[tuple[int, int, Record | None]], sample_times: U64
           ) -> tuple[I64, list[tuple[int, Record]]]:
    """perf's order (as :func:`.perf_order.time_ordered`): a record that arrived after
    round ``a`` is delivered at the first round ``k >= a`` whose limit (the newest time
    seen before the previous FINISHED_ROUND) is no older than its time, within a delivery
    by time, then in file order. Returns the samples' order and the other records with
    the number of samples delivered before each."""
    events = [(arrival, offset, record) for arrival, offset, record in others
              if record is not None]
    event_times = np.array([_time(record) for _, _, record in events], np.uint64)
    event_offsets = np.array([offset for _, offset, _ in events], np.int64)
    times = np.concatenate([sample_times, event_times]).astype(np.int64)  # < 2^63: checked
    file_offsets = np.concatenate([offsets, event_offsets])
    arrival = np.concatenate([np.searchsorted(boundaries, np.arange(len(offsets)), "right"),
                              np.array([a for a, _, _ in events], np.int64)]).astype(np.int64)
    limits = _round_limits(others, times, file_offsets)
    first = np.searchsorted(limits, times, "left")
    delivery = np.maximum(arrival, first)
    order = np.lexsort((file_offsets, times, delivery))
    is_sample = order < len(offsets)
    sample_order = order[is_sample]
    before = np.cumsum(is_sample)
    delivered = [(int(before[position]), events[int(index) - len(offsets)][2])
                 for position, index in zip(np.flatnonzero(~is_sample).tolist(),
                                            order[~is_sample].tolist(), strict=True)]
    return sample_order.astype(np.int64), delivered


def _round_limits(others: list[tuple[int, int, Record | None]], times: I64, file_offsets: I64
                  ) -> I64:
    """L[k] of every round k: the newest time of the records before round k - 1 in the file
    (-1 for round 0, and while no record came before)."""
    round_offsets = np.array([offset for _, offset, record in others if record is None],
                             np.int64)
    if not len(round_offsets):
        return np.zeros(0, np.int64)
    by_offset = np.argsort(file_offsets, kind="stable")
    running = np.maximum.accumulate(times[by_offset]) if len(times) else times
    seen = np.searchsorted(file_offsets[by_offset], round_offsets, "left")
    newest = np.where(seen > 0, running[np.maximum(seen - 1, 0)] if len(times) else -1, -1)
    limits = np.full(len(round_offsets), -1, np.int64)
    limits[1:] = newest[:-1]
    return limits
