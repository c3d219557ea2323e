"""What the kernel's SFrame deferred unwinder would have made of a ``--call-graph dwarf``
recording: one walk per kernel entry, its trace shared by the entry's samples.

The samples are read in ``perf script`` order with the recording's process model (our
dwarf unwinder's session, whose chains are the yardstick). Consecutive samples of one
thread taken in the kernel with unchanged user registers belong to one entry (a
syscall or fault in progress); every sample taken in user mode is an entry of its own
(the interrupt returns at once), unless it repeats the one before it (same time). Each
entry is driven through the model (:class:`~.infrastructure.DeferredUnwinder`: enter,
request, return to user space) over
the process's memory (:class:`~.mm.Mm`: its ELF files mapped with their ``PT_GNU_SFRAME``
sections registered as the kernel would, and the sample's stack copy, beyond which the
stack reads as unmapped). With ``assume_sframe`` every binary the kernel has no section
for gets our generated table (what a distribution rebuilt with ``--gsframe`` gives).

Each process's memory follows the side band as the kernel's does, not the session's
address space: an exec starts an empty one (the session keeps the old image's mappings
the new one does not cover, and the same library mapped by the old image at another
address would stand for the new image's), each executable MMAP maps its file over what
was there, in the order of the records (the executable and the loader at exec, the
libraries as the loader maps them: each registered, or given our table, as it comes),
and a fork copies the parent's.

Each sample then gets a verdict against our own chain: ``unwound`` (the same frames),
``cut short`` (the kernel's chain is a proper prefix of ours) with the binary and why
(no ``PT_GNU_SFRAME``, a table the kernel refuses, a damaged table it dropped at a fault,
a frame only DWARF recovers, the frame limit), ``differs`` (another chain: a
frame-pointer guess went elsewhere, or the kernel went further), or ``no user context``
(a kernel thread; nothing deferred).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from ..errors import PysframeError
from ..format.encode import relocate
from ..records import record_class
from ..session.perf import PerfUnwinder, UnwoundSample
from ..sources.perf_records import Comm, Mmap, Record
from ..sources.perf_records import Task as TaskRecord
from ..unwind.address_space import Mapping
from ..unwind.step import Stop
from .infrastructure import DeferredUnwinder, Task, UnwindWork
from .mm import Mm, map_elf
from .user_unwind import EntryRegisters, UserTrace

#: perf caps every callchain, deferred ones too, at kernel.perf_event_max_stack.
MAX_FRAMES = 127
CUT_NO_SFRAME = "no PT_GNU_SFRAME"
CUT_REFUSED = "table refused by the kernel"
#: The kernel took the binary's section, found it corrupt at a lookup and removed it (it
#: does not fall back to the binary's CFI): frame pointers from there on.
CUT_DROPPED = "kernel dropped its damaged .sframe"
CUT_DWARF_ONLY = "frame only DWARF recovers"
CUT_LIMIT = "frame limit"
CUT_NO_BINARY = "no binary"
#: The kernel would read the live stack where the recording holds no copy (below the
#: sampled SP, or past the copied bytes): not the kernel's limit but the recording's.
CUT_COPY = "beyond the recorded stack copy"
DIFFERS_FP = "frame-pointer fallback went astray"
DIFFERS_FURTHER = "kernel went further"
DIFFERS_OTHER = "another chain"
#: Where generated tables are placed in a process with ``assume_sframe``.
_GENERATED_BASE = 0x6FFF00000000
_SLOT = 0x4000000


@record_class
class Entry:
    """One kernel entry: its cookie, its thread, its last sample, the deferred trace."""

    cookie: int
    pid: int
    tid: int
    cpu: int
    last_time: int
    #: File offset of its last sample in file order (the record is written after it).
    last_offset: int
    trace: UserTrace | None = None
    #: The event id of its last sample (its record's sample_id_all trailer names it).
    sample_id: int = 0


@record_class
class Outcome:
    """The verdict on one sample (keyed by its file offset)."""

    cookie: int
    verdict: str
    reason: str = ""
    binary: str = ""


class WhatIf:
    """Runs the kernel's model over ``session``'s samples (see the module docstring)."""

    def __init__(self, session: PerfUnwinder, *, assume_sframe: bool = False,
                 max_frames: int = MAX_FRAMES) -> None:
        from ..session.perf import ABI_OF_ARCH

        self.session = session
        #: The recording's machine: the kernel's rules for it (:mod:`.arch`).
        self.abi = ABI_OF_ARCH[session.arch]
        self.assume_sframe = assume_sframe
        self.kernel = DeferredUnwinder(max_entries=max_frames)
        work = self.kernel.init(self._delivered, "perf")
        assert isinstance(work, UnwindWork)
        self.work = work
        self.entries: list[Entry] = []
        self.outcomes: dict[int, Outcome] = {}
        self._open: dict[int, tuple[Entry, tuple[int, ...], list[tuple[UnwoundSample, Mm]]]] = {}
        self._tasks: dict[int, Task] = {}
        #: Each process's memory now (by pid): replaced at exec, copied at fork.
        self._mms: dict[int, Mm] = {}
        self._delivering: Entry | None = None
        session.side_band_observers.append(self._side_band)

    def run(self) -> Iterator[UnwoundSample]:
        """Drive every sample through the model; yields them as read (for progress)."""
        for unwound in self.session.samples():
            self._sample(unwound)
            yield unwound
        for tid in list(self._open):
            self._close(tid)

    # -- entries -----------------------------------------------------------------------

    def _sample(self, unwound: UnwoundSample) -> None:
        sample = unwound.sample
        registers = self.session_registers(unwound)
        if registers is None:
            self._close(sample.tid)
            self.outcomes[sample.offset] = Outcome(0, "no user context")
            return
        mm = self._mm(sample.pid)
        in_kernel = sample.cpumode == 1
        key = tuple(sample.regs)
        found = self._open.get(sample.tid)
        # A repeated sample (same thread, time and registers: a 6.18 system-wide recording
        # held one twice, byte for byte) is the same entry too, wherever it was taken: two
        # entries at one time would put the second's sample before the first's deferred
        # record, and perf 7 takes a thread's pending samples as one entry's.
        if found is not None and found[1] == key and (
                in_kernel or sample.time == found[0].last_time):
            entry, _, members = found
            entry.last_time = sample.time
            if sample.offset > entry.last_offset:
                entry.last_offset, entry.sample_id = sample.offset, sample.id
            members.append((unwound, mm))
            return
        self._close(sample.tid)
        task = self._tasks.get(sample.tid)
        if task is None:
            task = self._tasks[sample.tid] = self.kernel.new_task(sample.tid, mm)
        task.mm = mm
        ip, sp, fp, lr = registers
        self.kernel.enter_kernel(task, EntryRegisters(ip, sp, fp, lr=lr), sample.cpu)
        _, cookie = self.kernel.request(self.work, task)
        entry = Entry(cookie, sample.pid, sample.tid, sample.cpu, sample.time, sample.offset,
                      sample_id=sample.id)
        self.entries.append(entry)
        self._open[sample.tid] = (entry, key, [(unwound, mm)])

    def _close(self, tid: int) -> None:
        """The thread returns to user space: the walk, the callback, the verdicts."""
        found = self._open.pop(tid, None)
        if found is None:
            return
        entry, _, members = found
        task = self._tasks[tid]
        last, mm = members[-1]
        sample = last.sample
        mm.overlay = (self._sp(last), sample.stack if sample.stack is not None else b"")
        task.mm = mm
        self._delivering = entry
        self.kernel.return_to_user(task)
        self._delivering = None
        trace = entry.trace or UserTrace([], Stop.NOT_USER, [])
        for unwound, _ in members:
            self.outcomes[unwound.sample.offset] = self._verdict(unwound, mm, trace,
                                                                 entry.cookie)
        mm.overlay = None

    def _delivered(self, work: UnwindWork, trace: UserTrace, cookie: int) -> None:
        """The tracer's callback: the trace of the entry being closed."""
        del work
        if self._delivering is not None and self._delivering.cookie == cookie:
            self._delivering.trace = trace

    # -- memory ------------------------------------------------------------------------

    def _mm(self, pid: int) -> Mm:
        """The process's memory now (empty for a process the side band has not shown)."""
        mm = self._mms.get(pid)
        if mm is None:
            mm = self._mms[pid] = Mm(abi=self.abi)
        return mm

    def _side_band(self, record: Record) -> None:
        """Follow a record the session has just followed (its mapping is in its space)."""
        if isinstance(record, Comm):
            if record.exec and record.pid == record.tid:
                # exec_mmap: a new mm, with no section; the new image's MMAPs follow.
                self._mms[record.pid] = Mm(abi=self.abi)
        elif isinstance(record, TaskRecord):
            parent = self._mms.get(record.ppid)
            if not record.exit and record.pid != record.ppid and parent is not None:
                self._mms[record.pid] = parent.fork()
        elif isinstance(record, Mmap) and record.executable:
            space = self.session.spaces.get(record.pid)
            mapping = space.find(record.start) if space is not None else None
            if mapping is not None and (mapping.start, mapping.filename) == (record.start,
                                                                             record.filename):
                self._map(self._mm(record.pid), mapping)

    def _map(self, mm: Mm, mapping: Mapping) -> None:
        module = mapping.module
        if module is None or module.image is None:
            return
        there = mm.vma_at(mapping.start)
        if there is not None and there.name == mapping.filename:
            return  # mapped already (one MMAP per executable segment; map_elf maps all)
        try:
            mapped = map_elf(mm, module.image.data, module.bias, mapping.filename)
        except (PysframeError, ValueError, struct.error):  # it costs its own frames
            mm.files[mapping.filename] = None
            return
        if self.assume_sframe and mapped.sframe != 0 and mapped.text is not None:
            assume_sframe(mm, module, mapped.text, mapping.filename)

    # -- verdicts ----------------------------------------------------------------------

    def session_registers(self, unwound: UnwoundSample) -> tuple[int, int, int, int] | None:
        """(ip, sp, fp, link register) at kernel entry, or None without user registers or
        stack copy."""
        from ..session.perf import sample_registers

        sample = unwound.sample
        if not sample.stack or not sample.regs:
            return None
        registers = sample_registers(sample, self.session.arch)
        if registers is None:
            return None
        return registers.pc, registers.sp, registers.fp, registers.lr

    def _sp(self, unwound: UnwoundSample) -> int:
        registers = self.session_registers(unwound)
        return registers[1] if registers is not None else 0

    def _verdict(self, unwound: UnwoundSample, mm: Mm, trace: UserTrace, cookie: int
                 ) -> Outcome:
        ours = unwound.unwind.pcs
        kernel = trace.entries
        if kernel == ours[:len(kernel)] and len(kernel) == len(ours):
            return Outcome(cookie, "unwound")
        if kernel == ours[:len(kernel)] and kernel:
            pc = kernel[-1]
            mapping = _mapping_at(unwound, len(kernel) - 1)
            binary = mapping.filename if mapping is not None else "[unknown]"
            return Outcome(cookie, "cut short", self._why(mm, trace, pc, mapping), binary)
        if ours == kernel[:len(ours)]:
            return Outcome(cookie, "differs", DIFFERS_FURTHER)
        # The frame whose step went elsewhere: the one before the first that differs.
        first = next(index for index, (a, b) in enumerate(zip(ours, kernel, strict=False))
                     if a != b)
        mapping = _mapping_at(unwound, max(first - 1, 0))
        binary = mapping.filename if mapping is not None else "[unknown]"
        return Outcome(cookie, "differs",
                       DIFFERS_FP if "fp" in trace.methods else DIFFERS_OTHER, binary)

    def _why(self, mm: Mm, trace: UserTrace, pc: int, mapping: Mapping | None) -> str:
        if trace.stop is Stop.DEPTH:
            return CUT_LIMIT
        if trace.stop is Stop.MEMORY and trace.fault is not None and mm.overlay_missed(
                trace.fault):
            return CUT_COPY
        if mapping is None or mapping.module is None:
            return CUT_NO_BINARY
        if mm.sframes.find_section(pc) is not None:
            return CUT_DWARF_ONLY
        if mm.sframes.dropped_damaged(mapping.filename):
            return CUT_DROPPED
        status = mm.files.get(mapping.filename)
        return CUT_REFUSED if status is not None and status != 0 else CUT_NO_SFRAME


def assume_sframe(mm: Mm, module: object, text: tuple[int, int], name: str) -> int | None:
    """Register our generated table for ``text``, the code of ``module`` (placed in a free
    area of its own): what the registry answered, or None when there is no table."""
    from ..generate.cache import sframe_for

    image = getattr(module, "image", None)
    bias = int(getattr(module, "bias", 0))
    try:
        data, address = sframe_for(image, version=3)  # type: ignore[arg-type]
        place = _free_slot(mm)
        moved = relocate(data, address + bias, place)
    except (PysframeError, ValueError, struct.error):  # no table: its frames as built
        return None
    mm.mmap(place, -(-len(moved) // 4096) * 4096, moved, name=f"{name} (generated)")
    return mm.sframes.add(place, place + len(moved), text[0], text[1], f"{name} (generated)")


def _free_slot(mm: Mm) -> int:
    """The first slot for a generated table no other table holds (a table left where it
    was when its file is mapped again elsewhere keeps its slot)."""
    place = _GENERATED_BASE
    while mm.vma_at(place) is not None:
        place += _SLOT
    return place


def _mapping_at(unwound: UnwoundSample, index: int) -> Mapping | None:
    """The mapping our unwinder found for frame ``index``."""
    mappings = unwound.mappings
    return mappings[index] if index < len(mappings) else None
