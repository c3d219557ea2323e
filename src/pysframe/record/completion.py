"""Chains the eBPF walker could not finish, finished in user space with the same step.

When the walker meets code that no loaded table covers (a binary whose table is still
being generated or loaded, code mapped a moment ago, a process whose entry is not
written yet), its record carries that frame's registers and a copy of the user stack
from its SP (``FLAG_STACK_COPY``). The recorder keeps such samples (at most
:data:`MOST_PENDING`), follows each process's executable mappings from the side band
(:class:`ProcessMaps`), and at the end unwinds each from its copy with the scalar tracer
(:mod:`pysframe.unwind`), over the process's mappings as they were when the sample came
and the tables the recorder has by then: the chain is the walker's frames up to that
frame, then the tracer's.
"""

from __future__ import annotations

import struct
from collections.abc import Container
from dataclasses import dataclass

from ..format.constants import ABI
from ..sources.perf_records import RECORD_MMAP2, EventAttr, Mmap, RecordParser
from ..unwind.address_space import AddressSpace, Mapping
from ..unwind.memory import StackMemory
from ..unwind.modules import BinaryFinder
from ..unwind.step import Stop
from ..unwind.unwinder import Registers, Unwinder
from .copies import CopyStore
from .perf_file import SAMPLE_TYPE
from .sampler import COPY_HEADER, RECORD, frames_end, user_at

#: Samples kept for completion (each holds its record in memory, up to ~8 KB at 1,024
#: frames, ~0.3 KB at 20; its copy is on disk: :mod:`.copies`): past this, a sample
#: keeps the walker's chain.
MOST_PENDING = 1 << 16
#: And at most this many bytes of stack copies waiting (a first -a run on a busy machine
#: waits for minutes of table generation: 2,000 samples a second of 16 KiB copies).
MOST_PENDING_BYTES = 2 << 30
#: And at most about this much memory held by them (:meth:`Pending.held`).
MOST_PENDING_MEMORY = 32 << 20
#: Side-band events kept per process (a process mapping code without end is bounded).
MOST_EVENTS = 65536
RECORD_COMM, RECORD_FORK = 3, 7
#: PERF_RECORD_MISC_COMM_EXEC: the COMM of an exec (a new image: its mappings follow).
MISC_COMM_EXEC = 0x2000
#: The side-band event's attributes, to parse its records (sample_id_all).
_SIDE_BAND = EventAttr(1, 9, SAMPLE_TYPE, 0, 1 << 18, 0, 0)


@dataclass(slots=True)
class Pending:
    """A sample to finish: its record's place in the recording, the walker's user frames,
    the frame the walker met uncovered code at (index, pc, sp, fp), the stack copied from
    that sp, its process and time."""

    sequence: int
    raw: bytes
    walked: list[int]
    index: int
    registers: tuple[int, int, int]
    copy: bytes
    pid: int
    time: int
    #: Where the copy is kept instead, in a :class:`~.copies.CopyStore` (-1: ``copy``),
    #: and its size.
    stored_at: int = -1
    stored_size: int = 0

    def held(self) -> int:
        """About the bytes it holds in memory (its record, its frames as Python ints, the
        object and its registers; its copy where it is not kept on disk)."""
        return len(self.raw) + len(self.copy) + 40 * len(self.walked) + 300

    def stack(self, store: CopyStore | None) -> bytes:
        """The stack copied (read back from ``store`` when it is kept there)."""
        if self.stored_at < 0 or store is None:
            return self.copy
        return store.get(self.stored_at, self.stored_size)


#: A process's executable mappings: (start, length, pgoff, path, build id) each.
Layout = tuple[tuple[int, int, int, str, bytes | None], ...]


class ProcessMaps:
    """Each process's executable mappings over time, followed from the side band: MMAP2
    maps code, an exec's COMM starts a new image, a fork starts from the parent's. Kept
    as history, as the layout a sample needs is the one at its time: the side band is
    read before the samples of each poll, and code mapped since then is in them. A
    process that exited is forgotten (:meth:`forget_exited`) once no sample waits for it,
    its children's forks made copies of its layout: an all-day ``-a`` run stays bounded."""

    def __init__(self) -> None:
        #: pid -> (time, event): ("map", mapping) / ("exec", None) / ("fork", parent) /
        #: ("image", layout): a fork whose parent was forgotten.
        self.events: dict[int, list[tuple[int, str, object]]] = {}
        self._parser = RecordParser([_SIDE_BAND])
        #: Processes with an event older than the one before it (read CPU by CPU):
        #: sorted by the next :meth:`in_order`, the others are in order already.
        self._unsorted: set[int] = set()
        #: The children forked from each process, and the processes that exited (pid ->
        #: the recorder's clock then, in seconds).
        self._children: dict[int, list[int]] = {}
        self._exited: dict[int, float] = {}

    def side_band(self, kind: int, misc: int, data: bytes, stamp: int) -> None:
        if kind == RECORD_MMAP2 and not misc & 0x2000:
            record = self._parser.parse(memoryview(data), kind, misc, 0, len(data), 0)
            if isinstance(record, Mmap) and record.filename.startswith("/"):
                self._add(record.pid, stamp, "map", (record.start, record.length,
                                                     record.pgoff, record.filename,
                                                     record.build_id))
        elif kind == RECORD_COMM and misc & MISC_COMM_EXEC:
            pid, tid = struct.unpack_from("<ii", data, 8)
            if pid == tid:
                self._add(pid, stamp, "exec", None)
        elif kind == RECORD_FORK:
            child, parent = struct.unpack_from("<ii", data, 8)
            if child != parent:
                self._add(child, stamp, "fork", parent)
                self._children.setdefault(parent, []).append(child)

    def _add(self, pid: int, stamp: int, kind: str, value: object) -> None:
        events = self.events.setdefault(pid, [])
        if len(events) < MOST_EVENTS:
            if events and stamp < events[-1][0]:
                self._unsorted.add(pid)
            events.append((stamp, kind, value))

    def in_order(self) -> None:
        """Each process's events in time order (the side band is read CPU by CPU)."""
        for pid in self._unsorted:
            self.events.get(pid, []).sort(key=lambda event: event[0])
        self._unsorted.clear()

    def exited(self, pid: int, now: float) -> None:
        """``pid`` exited (its EXIT record came at ``now``, the recorder's clock)."""
        self._exited[pid] = now

    def forget_exited(self, now: float, waiting: Container[int], grace: float = 2.0) -> int:
        """Forget the processes that exited at least ``grace`` seconds before ``now``
        (a sample read after its process's EXIT, from another CPU's buffer, still finds
        it) and for which no sample waits; returns how many were forgotten."""
        gone = [pid for pid, when in self._exited.items()
                if now - when >= grace and pid not in waiting]
        if gone:
            self.in_order()
        for pid in gone:
            del self._exited[pid]
            for child in self._children.pop(pid, ()):
                self._copy_fork(child, pid)
            self.events.pop(pid, None)
        return len(gone)

    def _copy_fork(self, child: int, parent: int) -> None:
        """The child's fork from ``parent`` replaced by the parent's layout then."""
        events = self.events.get(child)
        for index, (stamp, kind, value) in enumerate(events or ()):
            if kind == "fork" and value == parent and events is not None:
                events[index] = (stamp, "image", self.layout(parent, stamp))

    def layout(self, pid: int, time: int, depth: int = 0) -> Layout:
        """The process's executable mappings at ``time`` (events in order: :meth:`in_order`)."""
        found: list[tuple[int, int, int, str, bytes | None]] = []
        for stamp, kind, value in self.events.get(pid, ()):
            if stamp > time:
                break
            if kind == "exec":
                found = []
            elif kind == "fork" and isinstance(value, int) and depth < 64:
                found = list(self.layout(value, stamp, depth + 1))
            elif kind == "image":
                found = list(value)  # type: ignore[call-overload]
            elif kind == "map":
                found.append(value)  # type: ignore[arg-type]
        return tuple(found)


def pending_of(sequence: int, raw: bytes | memoryview, frames: int,
               store: CopyStore | None = None) -> Pending | None:
    """The sample to finish from a walker record with a stack copy (None: none usable);
    the copy is put into ``store`` when one is given."""
    fields = RECORD.unpack_from(raw)
    pid, time, user_count = fields[2], fields[4], fields[7]
    at = frames_end(raw, frames)  # the copy's note: after the user frames
    if len(raw) < at + COPY_HEADER.size:
        return None
    index, length, pc, sp, fp = COPY_HEADER.unpack_from(raw, at)
    walked = list(struct.unpack_from(f"<{min(user_count, frames)}Q", raw, user_at(raw)))
    if not length or index >= max(len(walked), 1):
        return None
    copy = bytes(raw[at + COPY_HEADER.size:at + COPY_HEADER.size + length])
    # The record kept up to its user frames (its copy is kept apart): what
    # sample_record reads when the chain is rewritten.
    kept = bytes(raw[:at])
    if store is not None:
        return Pending(sequence, kept, walked, index, (pc, sp, fp), b"", pid, time,
                       store.put(copy), len(copy))
    return Pending(sequence, kept, walked, index, (pc, sp, fp), copy, pid, time)


def finish(pending: list[Pending], maps: ProcessMaps, finder: BinaryFinder, frames: int,
           layouts: list[Layout] | None = None, store: CopyStore | None = None
           ) -> dict[int, tuple[list[int], Stop]]:
    """Each pending sample's user chain finished in user space (by sequence), and why it
    ended; a sample the tracer gets no further with keeps the walker's chain (absent).
    ``layouts``: each sample's mappings, taken before (else read from ``maps`` here);
    ``store``: where the copies are kept (each is dropped from it once used)."""
    unwinder = Unwinder(ABI.AMD64_ENDIAN_LITTLE, frames)
    if layouts is None:
        maps.in_order()
        layouts = [maps.layout(item.pid, item.time) for item in pending]
    spaces: dict[Layout, AddressSpace] = {}
    done: dict[int, tuple[list[int], Stop]] = {}
    for item, layout in zip(pending, layouts, strict=True):
        space = spaces.get(layout)
        if space is None:
            space = spaces[layout] = _space(layout, finder)
        pc, sp, fp = item.registers
        unwind = unwinder.unwind(Registers(pc, sp, fp), StackMemory(sp, item.stack(store)),
                                 space, topmost=item.index == 0)
        if store is not None and item.stored_at >= 0:
            store.drop(item.stored_at, item.stored_size)
        chain = (item.walked[:item.index] + unwind.pcs)[:frames]
        # Kept when it does better than the walker's frame-pointer guesses from there: to
        # the outermost frame, or further (code no table covers, such as a JIT's, keeps
        # the walker's chain when the tracer cannot step it either).
        if unwind.stop is Stop.OUTERMOST or len(chain) > len(item.walked):
            done[item.sequence] = (chain, unwind.stop)
    return done


def _space(layout: Layout, finder: BinaryFinder) -> AddressSpace:
    space = AddressSpace()
    for start, length, pgoff, path, build_id in layout:
        module = finder.module(path, build_id, start, pgoff)
        lookup = getattr(module, "lookup", None)
        if lookup is not None:
            # Stepwise lookups only: the chains finished touch a few functions, and a flat
            # index of a compiler's 535k rows is ~100 MiB of Python objects.
            lookup.flat_threshold = 1 << 62
        space.add(Mapping(start, start + length, pgoff, path, build_id, module))
    return space
