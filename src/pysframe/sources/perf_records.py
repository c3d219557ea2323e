"""The records of a perf.data data section: their types, and parsing one record.

Split from :mod:`.perf_data` (which walks the file and its compressed records): every
function here reads one record of ``size`` bytes at ``offset`` in a buffer, and every
field it reads lies inside that record (a read past it raises ``struct.error`` or
``ValueError``, which the walker reports as a malformed record).
"""

from __future__ import annotations

import struct

from ..records import record_class

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# Record types.
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_FORK = 7
RECORD_SAMPLE = 9
#: perf >= 6.19 (deferred user callchains): the user part of earlier samples.
RECORD_CALLCHAIN_DEFERRED = 22
RECORD_MMAP2 = 10
RECORD_LOST_SAMPLES = 13
RECORD_FINISHED_ROUND = 68
RECORD_COMPRESSED = 81
RECORD_COMPRESSED2 = 83
#: Records whose payload is more records, compressed.
COMPRESSED_KINDS = (RECORD_COMPRESSED, RECORD_COMPRESSED2)

# sample_type bits.
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13
SAMPLE_WEIGHT = 1 << 14
SAMPLE_DATA_SRC = 1 << 15
SAMPLE_IDENTIFIER = 1 << 16

#: branch_sample_type bits: the LBR call stack, and a hw_idx word before the entries.
BRANCH_CALL_STACK = 1 << 11
BRANCH_HW_INDEX = 1 << 17

_U64 = struct.Struct("<Q")
#: A sample's IP and the pid of its TID field, which follows it.
_IP_PID = struct.Struct("<Qi")
#: What a sample must record for its topmost frame to be unwound from its registers.
_UNWOUND_FROM = SAMPLE_IP | SAMPLE_TID | SAMPLE_REGS_USER | SAMPLE_STACK_USER
#: Every record's header: type, misc, size (perf_event_header).
RECORD_HEADER = struct.Struct("<IHH")


@record_class
class EventAttr:
    type: int
    config: int
    sample_type: int
    read_format: int
    flags: int
    sample_regs_user: int
    sample_stack_user: int
    ids: tuple[int, ...] = ()
    branch_sample_type: int = 0
    #: The event's name as perf recorded it in the EVENT_DESC feature (``cpu-clock:u``),
    #: None when the recording has none for it.
    name: str | None = None

    @property
    def lbr_callstack(self) -> bool:
        """LBR call-stack recording (``--call-graph lbr``): user chains come from the
        branch stack."""
        return bool(self.sample_type & SAMPLE_BRANCH_STACK
                    and self.branch_sample_type & BRANCH_CALL_STACK)

    @property
    def sample_id_all(self) -> bool:
        return bool(self.flags & (1 << 18))


@record_class
class Sample:
    """One PERF_RECORD_SAMPLE; ``stack`` is a view into the mapped file."""

    offset: int
    misc: int
    ip: int = 0
    pid: int = 0
    tid: int = 0
    time: int = 0
    addr: int = 0
    id: int = 0
    cpu: int = 0
    period: int = 0
    callchain: tuple[int, ...] = ()
    #: The branch stack's (from, to) pairs, newest first.
    branches: tuple[tuple[int, int], ...] = ()
    regs_abi: int = 0
    regs: tuple[int, ...] = ()
    stack: memoryview | None = None
    stack_dyn_size: int = 0
    attr: EventAttr | None = None
    #: Where ``stack`` lies in the file (-1: not in it, e.g. inflated from a compressed record).
    stack_offset: int = -1
    #: Not a sample but a PERF_RECORD_CALLCHAIN_DEFERRED shown apart (``--no-merge-callchains``):
    #: its cookie; the callchain is ``USER, ips...``.
    deferred_record: int | None = None
    #: PERF_SAMPLE_RAW's data (a view into the file; None: the sample type has no RAW).
    raw: memoryview | None = None

    @property
    def cpumode(self) -> int:
        return self.misc & 7


@record_class
class Mmap:
    offset: int
    pid: int
    tid: int
    start: int
    length: int
    pgoff: int
    filename: str
    prot: int = 0
    flags: int = 0
    build_id: bytes | None = None
    time: int = 0
    executable: bool = True


@record_class
class Comm:
    offset: int
    pid: int
    tid: int
    comm: str
    exec: bool
    time: int = 0


@record_class
class Task:
    """FORK (``exit`` False) or EXIT (``exit`` True)."""

    offset: int
    pid: int
    ppid: int
    tid: int
    ptid: int
    time: int
    exit: bool


@record_class
class Lost:
    offset: int
    lost: int
    time: int = 0


@record_class
class FinishedRound:
    offset: int


@record_class
class CallchainDeferred:
    """PERF_RECORD_CALLCHAIN_DEFERRED: the user callchain the kernel walked at the return
    to user space, for the samples of thread ``tid`` that carry ``cookie``."""

    offset: int
    cookie: int
    ips: tuple[int, ...]
    pid: int = -1
    tid: int = -1
    time: int = 0
    cpu: int = 0


@record_class
class Followed:
    """A sample a ``script -j`` worker passes over on its way to its share (see
    :meth:`RecordParser.follow`): where it is and its time, checked whole as a sample
    would be but not read (its registers, callchain and stack)."""

    offset: int
    time: int = 0


Record = Sample | Mmap | Comm | Task | Lost | FinishedRound | CallchainDeferred | Followed


@record_class
class BuildIdEntry:
    pid: int
    build_id: bytes
    filename: str
    kernel: bool


#: The fixed-size sample fields in record order: sample_type bit, struct format, the Sample
#: fields they fill (none: skipped).
_PREFIX_FIELDS = ((SAMPLE_IDENTIFIER, "8x", ()), (SAMPLE_IP, "Q", ("ip",)),
                  (SAMPLE_TID, "ii", ("pid", "tid")), (SAMPLE_TIME, "Q", ("time",)),
                  (SAMPLE_ADDR, "Q", ("addr",)), (SAMPLE_ID, "Q", ("id",)),
                  (SAMPLE_STREAM_ID, "8x", ()), (SAMPLE_CPU, "I4x", ("cpu",)),
                  (SAMPLE_PERIOD, "Q", ("period",)))
_prefix_layouts: dict[int, tuple[struct.Struct, tuple[str, ...]]] = {}


def _prefix_layout(sample_type: int) -> tuple[struct.Struct, tuple[str, ...]]:
    """The layout of a sample's fixed-size fields for ``sample_type`` (made once each)."""
    found = _prefix_layouts.get(sample_type)
    if found is None:
        chosen = [(form, names) for bit, form, names in _PREFIX_FIELDS if sample_type & bit]
        found = (struct.Struct("<" + "".join(form for form, _ in chosen)),
                 tuple(name for _, names in chosen for name in names))
        _prefix_layouts[sample_type] = found
    return found


def id_word(sample_type: int) -> int | None:
    """The word of a sample (its header is word 0) that names its event: IDENTIFIER, the
    first, else ID, after IP, TID, TIME and ADDR; None without either."""
    if sample_type & SAMPLE_IDENTIFIER:
        return 1
    if sample_type & SAMPLE_ID:
        return 1 + (sample_type & (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR)
                    ).bit_count()
    return None


#: The Sample fields the fixed-size fields may fill, in record and constructor order.
_PREFIX_NAMES = ("ip", "pid", "tid", "time", "addr", "id", "cpu", "period")
#: What a sample of these types holds is read by the general parse alone.
_GENERAL_ONLY = SAMPLE_READ | SAMPLE_RAW | SAMPLE_BRANCH_STACK

if TYPE_CHECKING:
    SampleParser = Callable[[memoryview, int, int, int, int], "Sample | None"]
    SampleFollower = Callable[[memoryview, int, int, int], "Followed | None"]


def sample_parser(attr: EventAttr) -> tuple[SampleParser, SampleFollower] | None:
    """The samples of ``attr`` read with their layout worked out once (None for the sample
    types :data:`_GENERAL_ONLY` names): the fixed-size fields, the callchain, the user
    registers and the stack copy, each checked to lie in the record, and the Sample made
    by one constructor call (compiled for the event's fields, as :mod:`pysframe.records`
    compiles ``__init__``). The Lua recording's samples took 1.3 us each against 1.9 for
    the general parse (Debian's Python 3.11; 1.75 against 2.85 with pyenv's). A record
    that fails a check gives None: the general parse reads it then, and raises the error
    that says what is wrong (the same text either way). The text compiled is ours: the
    names come from :data:`_PREFIX_FIELDS`, never from the recording."""
    sample_type = attr.sample_type
    if sample_type & _GENERAL_ONLY:
        return None
    prefix, names = _prefix_layout(sample_type)
    read_prefix = prefix.unpack_from
    read_word = _U64.unpack_from
    prefix_end, register_bytes, chained, registered, stacked = _shape(attr)
    read_registers = struct.Struct(f"<{register_bytes // 8}Q").unpack_from
    make = _sample_maker(names, attr)

    def parse(buffer: memoryview, misc: int, offset: int, size: int, base: int
              ) -> Sample | None:
        end = offset + size
        position = offset + prefix_end
        if position > end or end > len(buffer):
            return None
        fields = read_prefix(buffer, offset + 8)
        callchain: tuple[int, ...] = ()
        if chained:
            if position + 8 > end:
                return None
            count = read_word(buffer, position)[0]
            position += 8
            if position + 8 * count > end:
                return None
            callchain = struct.unpack_from(f"<{count}Q", buffer, position)
            position += 8 * count
        regs_abi, regs = 0, ()
        if registered:
            if position + 8 > end:
                return None
            regs_abi = read_word(buffer, position)[0]
            position += 8
            if regs_abi:
                if position + register_bytes > end:
                    return None
                regs = read_registers(buffer, position)
                position += register_bytes
        stack, dyn_size, stack_offset = None, 0, -1
        if stacked:
            if position + 8 > end:
                return None
            stack_size = read_word(buffer, position)[0]
            position += 8
            if stack_size:
                if position + stack_size + 8 > end:
                    return None
                dyn_size = min(read_word(buffer, position + stack_size)[0], stack_size)
                stack = buffer[position:position + dyn_size]
                if not base:  # a record of the file itself (base 0), not of inflated data
                    stack_offset = position
        return make(base + offset, misc, fields, callchain, regs_abi, regs, stack, dyn_size,
                    stack_offset)

    return parse, _sample_follower(attr)


def _sample_follower(attr: EventAttr) -> SampleFollower:
    """What :func:`sample_parser`'s parse checks of a sample of ``attr``, giving only its
    place and time (:class:`Followed`), or None where the parse would give None."""
    prefix_end, register_bytes, chained, registered, stacked = _shape(attr)
    time_at = _time_offset(attr.sample_type)
    read_word = _U64.unpack_from

    def follow(buffer: memoryview, offset: int, size: int, base: int) -> Followed | None:
        # parse()'s checks, in its order, without reading what they bound
        end = offset + size
        position = offset + prefix_end
        if position > end or end > len(buffer):
            return None
        if chained:
            if position + 8 > end:
                return None
            position += 8 + 8 * read_word(buffer, position)[0]
            if position > end:
                return None
        if registered:
            if position + 8 > end:
                return None
            position += 8
            if read_word(buffer, position - 8)[0]:
                position += register_bytes
                if position > end:
                    return None
        if stacked:
            if position + 8 > end:
                return None
            stack_size = read_word(buffer, position)[0]
            if stack_size and position + 8 + stack_size + 8 > end:
                return None
        return Followed(base + offset, read_word(buffer, offset + 8 + time_at)[0]
                        if time_at >= 0 else 0)

    return follow


def _shape(attr: EventAttr) -> tuple[int, int, bool, bool, bool]:
    """Where a sample of ``attr`` is laid out as :func:`sample_parser` and its follower
    read it: where its fixed-size fields end (from the record's start), the bytes of its
    user registers, and whether it has a callchain, user registers, a stack copy."""
    sample_type = attr.sample_type
    return (8 + _prefix_layout(sample_type)[0].size, 8 * attr.sample_regs_user.bit_count(),
            bool(sample_type & SAMPLE_CALLCHAIN), bool(sample_type & SAMPLE_REGS_USER),
            bool(sample_type & SAMPLE_STACK_USER))


def _ip_place(sample_type: int) -> int:
    """Where a sample's IP is from the start of its record, when its event records what
    :meth:`RecordParser.ahead` looks for (0: it does not)."""
    if sample_type & _UNWOUND_FROM != _UNWOUND_FROM:
        return 0
    return 8 + (8 if sample_type & SAMPLE_IDENTIFIER else 0)


def _time_offset(sample_type: int) -> int:
    """Where a sample's TIME field is from the end of its header (-1: it has none)."""
    at = 0
    for bit, form, _ in _PREFIX_FIELDS:
        if sample_type & bit:
            if bit == SAMPLE_TIME:
                return at
            at += struct.calcsize("<" + form)
    return -1


def _sample_maker(names: tuple[str, ...], attr: EventAttr) -> Callable[..., Sample]:
    """A function making a Sample of ``attr`` from its fixed-size fields (``names``, in
    record order) and the rest, in one constructor call (our own text, compiled once per
    event)."""
    fields = ", ".join(f"fields[{names.index(name)}]" if name in names else "0"
                       for name in _PREFIX_NAMES)
    source = ("def make(offset, misc, fields, callchain, regs_abi, regs, stack, dyn_size,"
              " stack_offset):\n"
              f"    return Sample(offset, misc, {fields}, callchain, (), regs_abi, regs, stack,"
              " dyn_size, attr, stack_offset)\n")
    scope: dict[str, Any] = {"Sample": Sample, "attr": attr}
    exec(source, scope)
    made: Callable[..., Sample] = scope["make"]
    return made


class RecordParser:
    """Parses single records with the recording's event attributes."""

    __slots__ = ("_parsers", "attrs", "by_id", "following")

    def __init__(self, attrs: list[EventAttr]) -> None:
        self.attrs = attrs
        self.by_id: dict[int, EventAttr] = {}
        for attr in attrs:
            for identifier in attr.ids:
                self.by_id[identifier] = attr
        #: Each event's :func:`sample_parser` (None: its samples take the general parse),
        #: by ``id`` of the event (made at its first sample).
        self._parsers: dict[int, tuple[SampleParser, SampleFollower] | None] = {}
        #: Samples are only followed (:meth:`follow`).
        self.following = False

    def follow(self, on: bool) -> None:
        """From now on (``on``), a sample of the file that its fields fit is read as
        :class:`Followed` (its place and time), not whole: a ``script -j`` worker passes
        over the samples before its share (1,761 in the Lua recording's second share: a
        whole read ~1.75 us each, ~0.5 this way); a malformed one is still read whole (and
        skipped as such). :meth:`~.perf_data.PerfData.record_at` reads one whole later."""
        self.following = on

    def ahead(self, buffer: memoryview, offset: int, end: int, count: int
              ) -> tuple[dict[tuple[int, int], None], int | None]:
        """(pid, ip) of the next ``count`` samples of the file from the record at ``offset``
        (up to ``end``), each once, in file order: those of events that record an IP, a TID,
        user registers and a stack copy (whose topmost frames will be unwound from that
        ip); and where the glance stopped (None: at a compressed record, or one that does
        not fit in the file, where no later glance goes). A glance, not a reading: only
        each record's header and those two fields are read (every sample is read and
        checked as ever when its turn comes)."""
        found: dict[tuple[int, int], None] = {}
        header = RECORD_HEADER.unpack_from
        ip_pid = _IP_PID.unpack_from
        places: dict[int, int] = {}  # id of an event -> where IP is in its samples (0: not)
        only = self.attrs[0] if len(self.attrs) == 1 else None
        while count > 0 and offset + 8 <= end:
            kind, _, size = header(buffer, offset)
            if size < 8 or offset + size > len(buffer) or kind in COMPRESSED_KINDS:
                return found, None
            if offset + size > end:
                break
            if kind == RECORD_SAMPLE:
                count -= 1
                attr = only or self._attr_for(buffer, offset, size)
                at = places.get(id(attr))
                if at is None:
                    at = places[id(attr)] = _ip_place(attr.sample_type)
                if at and at + _IP_PID.size <= size:
                    ip, pid = ip_pid(buffer, offset + at)
                    found[(pid, ip)] = None
            offset += size
        return found, offset

    def _attr_for(self, buffer: memoryview, offset: int, size: int) -> EventAttr:
        """The event of the sample at ``offset``: the one its IDENTIFIER names (the first
        word), else its ID (after IP, TID, TIME and ADDR, where every event of a recording
        has it: perf refuses events whose ids lie elsewhere), else the first event."""
        if len(self.attrs) == 1:
            return self.attrs[0]
        attr = self.attrs[0]
        word = id_word(attr.sample_type)
        if word is None:
            return attr
        at = offset + 8 * word
        if at + 8 > offset + size:
            return attr  # (the sample's own parse reports it)
        return self.by_id.get(_U64.unpack_from(buffer, at)[0], attr)

    def parse(self, buffer: memoryview, kind: int, misc: int, offset: int, size: int,
              base: int) -> Record | None:
        """The record of ``kind`` at ``offset`` (None: a type we do not use); its ``offset``
        field is ``base + offset``."""
        if kind == RECORD_SAMPLE:
            return self._sample(buffer, misc, offset, size, base)
        if kind in (RECORD_MMAP, RECORD_MMAP2):
            return self._mmap(buffer, kind, misc, offset, size, base)
        if kind == RECORD_COMM:
            pid, tid = struct.unpack_from("<ii", buffer, offset + 8)
            name_end = offset + size - self._trailer_size()
            name = bytes(buffer[offset + 16:name_end]).split(b"\0", 1)[0].decode("utf-8",
                                                                                  "replace")
            return Comm(base + offset, pid, tid, name, bool(misc & 0x2000),
                        self._trailer_time(buffer, offset, size))
        if kind in (RECORD_FORK, RECORD_EXIT):
            pid, ppid, tid, ptid, time = struct.unpack_from("<iiiiQ", buffer, offset + 8)
            return Task(base + offset, pid, ppid, tid, ptid, time, kind == RECORD_EXIT)
        if kind == RECORD_LOST:
            _, lost = struct.unpack_from("<QQ", buffer, offset + 8)
            return Lost(base + offset, lost, self._trailer_time(buffer, offset, size))
        if kind == RECORD_LOST_SAMPLES:
            lost = _U64.unpack_from(buffer, offset + 8)[0]
            return Lost(base + offset, lost, self._trailer_time(buffer, offset, size))
        if kind == RECORD_FINISHED_ROUND:
            return FinishedRound(base + offset)
        if kind == RECORD_CALLCHAIN_DEFERRED:
            return self._callchain_deferred(buffer, offset, size, base)
        return None

    def _callchain_deferred(self, buffer: memoryview, offset: int, size: int, base: int
                            ) -> CallchainDeferred:
        cookie, count = struct.unpack_from("<QQ", buffer, offset + 8)
        if 24 + 8 * count + self._trailer_size() > size:
            raise ValueError(f"deferred callchain of {count} entries runs past the record")
        ips = struct.unpack_from(f"<{count}Q", buffer, offset + 24)
        pid, tid, time, cpu = self._trailer(buffer, offset, size)
        return CallchainDeferred(base + offset, cookie, ips, pid, tid, time, cpu)

    def _trailer(self, buffer: memoryview, offset: int, size: int) -> tuple[int, int, int, int]:
        """(pid, tid, time, cpu) of a non-sample record's sample_id_all trailer (-1, -1,
        0, 0 for the fields it lacks)."""
        attr = self.attrs[0]
        pid = tid = -1
        time = cpu = 0
        if not attr.sample_id_all:
            return pid, tid, time, cpu
        position = offset + size - self._trailer_size()
        for bit in (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU):
            if not attr.sample_type & bit:
                continue
            if bit == SAMPLE_TID:
                pid, tid = struct.unpack_from("<ii", buffer, position)
            elif bit == SAMPLE_TIME:
                time = int(_U64.unpack_from(buffer, position)[0])
            elif bit == SAMPLE_CPU:
                cpu = struct.unpack_from("<I", buffer, position)[0]
            position += 8
        return pid, tid, time, cpu

    def _trailer_size(self) -> int:
        attr = self.attrs[0]
        if not attr.sample_id_all:
            return 0
        sample_type = attr.sample_type
        size = 0
        for bit in (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU,
                    SAMPLE_IDENTIFIER):
            if sample_type & bit:
                size += 8
        return size

    def _trailer_time(self, buffer: memoryview, offset: int, size: int) -> int:
        """The TIME field of the sample_id_all trailer of a non-sample record (0 if none)."""
        attr = self.attrs[0]
        if not attr.sample_id_all or not attr.sample_type & SAMPLE_TIME:
            return 0
        position = offset + size - self._trailer_size()
        if attr.sample_type & SAMPLE_TID:
            position += 8
        return int(_U64.unpack_from(buffer, position)[0])

    def _mmap(self, buffer: memoryview, kind: int, misc: int, offset: int, size: int,
              base: int) -> Mmap:
        pid, tid, start, length, pgoff = struct.unpack_from("<iiQQQ", buffer, offset + 8)
        build_id = None
        prot = flags = 0
        if kind == RECORD_MMAP2:
            if misc & 0x4000:
                id_size = buffer[offset + 40]
                build_id = bytes(buffer[offset + 44:offset + 44 + min(id_size, 20)])
            prot, flags = struct.unpack_from("<II", buffer, offset + 64)
            name_at = offset + 72
        else:
            name_at = offset + 40
        name_end = offset + size - self._trailer_size()
        name = bytes(buffer[name_at:name_end]).split(b"\0", 1)[0].decode("utf-8", "replace")
        executable = not misc & 0x2000 if kind == RECORD_MMAP2 or prot == 0 else bool(prot & 4)
        return Mmap(base + offset, pid, tid, start, length, pgoff, name, prot, flags, build_id,
                    self._trailer_time(buffer, offset, size), executable)

    def _sample(self, buffer: memoryview, misc: int, offset: int, size: int,
                base: int) -> Sample:
        attrs = self.attrs
        attr = attrs[0] if len(attrs) == 1 else self._attr_for(buffer, offset, size)
        try:
            parser = self._parsers[id(attr)]
        except KeyError:
            parser = self._parsers[id(attr)] = sample_parser(attr)
        if parser is not None:
            if self.following and not base:
                followed = parser[1](buffer, offset, size, base)
                if followed is not None:
                    return followed  # type: ignore[return-value]  # (see follow)
            sample = parser[0](buffer, misc, offset, size, base)
            if sample is not None:
                return sample
        return self._general_sample(attr, buffer, misc, offset, size, base)

    def _general_sample(self, attr: EventAttr, buffer: memoryview, misc: int, offset: int,
                        size: int, base: int) -> Sample:
        """Any sample, read field by field (:func:`sample_parser`'s fallback: it raises
        the error that says what is wrong with a malformed one)."""
        sample_type = attr.sample_type
        end = offset + size
        sample = Sample(base + offset, misc, attr=attr)
        unpack = _U64.unpack_from
        # The fixed-size fields before the callchain, in one read (a layout per sample type).
        layout, names = _prefix_layout(sample_type)
        if offset + 8 + layout.size > end:
            raise ValueError("sample fields run past the record")
        for name, value in zip(names, layout.unpack_from(buffer, offset + 8), strict=True):
            setattr(sample, name, value)
        position = offset + 8 + layout.size
        if sample_type & SAMPLE_READ:
            raise ValueError("PERF_SAMPLE_READ is not supported")
        if sample_type & SAMPLE_CALLCHAIN:
            count = unpack(buffer, position)[0]
            position += 8
            if position + 8 * count > end:
                raise ValueError(f"callchain of {count} entries runs past the record")
            sample.callchain = struct.unpack_from(f"<{count}Q", buffer, position)
            position += 8 * count
        if sample_type & SAMPLE_RAW:
            raw_size = struct.unpack_from("<I", buffer, position)[0]
            if position + 4 + raw_size > end:
                raise ValueError(f"raw data of {raw_size} bytes runs past the record")
            sample.raw = buffer[position + 4:position + 4 + raw_size]
            position += 4 + raw_size
        if sample_type & SAMPLE_BRANCH_STACK:
            count = unpack(buffer, position)[0]
            position += 16 if attr.branch_sample_type & BRANCH_HW_INDEX else 8
            if position + 24 * count > end:
                raise ValueError(f"branch stack of {count} entries runs past the record")
            words = struct.unpack_from(f"<{3 * count}Q", buffer, position)
            sample.branches = tuple(zip(words[0::3], words[1::3], strict=True))
            position += 24 * count
        if sample_type & SAMPLE_REGS_USER:
            sample.regs_abi = unpack(buffer, position)[0]
            position += 8
            if sample.regs_abi:
                count = attr.sample_regs_user.bit_count()
                if position + 8 * count > end:
                    raise ValueError("user registers run past the record")
                sample.regs = struct.unpack_from(f"<{count}Q", buffer, position)
                position += 8 * count
        if sample_type & SAMPLE_STACK_USER:
            stack_size = unpack(buffer, position)[0]
            position += 8
            if stack_size:
                if position + stack_size + 8 > end:
                    raise ValueError(f"user stack of {stack_size} bytes runs past the record")
                dyn_size = unpack(buffer, position + stack_size)[0]
                sample.stack_dyn_size = min(dyn_size, stack_size)
                sample.stack = buffer[position:position + sample.stack_dyn_size]
                if not base:  # a record of the file itself (base 0), not of inflated data
                    sample.stack_offset = position
                position += stack_size + 8
        return sample

