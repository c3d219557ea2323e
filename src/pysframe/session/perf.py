"""Unwinding the samples of a perf.data recording (``--call-graph dwarf``) with SFrame.

Follows the process model of the recording: MMAP/MMAP2 build each process's
address space, FORK copies it, an exec (COMM with the exec flag) maps the new
image over the old one: the old image's mappings it does not cover stay in the space
(the tracer looks frames up by address; a model of the memory of the new image alone,
as ``sframe defer``'s, follows the exec through ``side_band_observers``). Each
sample's user registers and stack copy feed the tracer.
"""

from __future__ import annotations

import os
from itertools import chain
from time import perf_counter

from ..elf import ElfError, ElfImage
from ..errors import Problems, PysframeError
from ..format.constants import ABI
from ..inputs import read_text
from ..records import record_class
from ..sources.perf_data import Comm, Mmap, PerfData, Record, Sample, Task, is_jitdump
from ..sources.perf_deferred import (
    PERF_CONTEXT_USER_DEFERRED,
    Stitcher,
    defers_callchains,
    kernel_part,
)
from ..sources.perf_order import time_ordered
from ..sources.perf_records import (
    RECORD_MMAP,
    RECORD_MMAP2,
    SAMPLE_CALLCHAIN,
    SAMPLE_STACK_USER,
    CallchainDeferred,
    Followed,
)
from ..unwind.address_space import JIT_FILENAME, AddressSpace, Mapping
from ..unwind.memory import StackMemory
from ..unwind.provider import TableProvider
from ..unwind.unwinder import FrameMethod, Registers, Stop, Unwind, Unwinder
from .finding import binary_finder, recorded_build_ids
from .tables import GeneratedTables

TYPE_CHECKING = False  # typing is not imported at run time (see pysframe.records)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from .filters import SampleFilter

#: perf's callchain context markers are the top 4095 values; PERF_CONTEXT_USER is -512.
CONTEXT_MARKER_MIN = (1 << 64) - 4095
PERF_CONTEXT_USER = (1 << 64) - 512
#: Addresses at or above this are the kernel's (x86-64, AArch64 and s390x perf samples).
KERNEL_START = 1 << 63
#: The most samples, and bytes of the file, ahead whose topmost frames are planned at
#: once (:meth:`PerfUnwinder._plan_ahead`: at the first sample of a run or a ``-j``
#: share, then at the first past them). The pages glanced at stay mapped until the
#: reading passes them: the span bounds what the look adds to the resident set.
PLAN_AHEAD, AHEAD_SPAN = 1 << 15, 8 << 20
#: A file offset past every record: no more samples are planned ahead.
_NEVER = 1 << 62
#: The samples planned at a time while a ``-j`` run waits before its fork
#: (:meth:`PerfUnwinder.plan_meanwhile`): between two looks, whether it still waits.
MEANWHILE = 128


@record_class(frozen=True)
class PerfRegisterLayout:
    """perf's register indices (``perf_regs.h``) of ip, sp, fp, the link register, and
    DWARF register number -> perf index."""

    ip: int
    sp: int
    fp: int
    lr: int | None
    dwarf: dict[int, int]


PERF_REGS = {
    "x86_64": PerfRegisterLayout(8, 7, 6, None, {0: 0, 1: 3, 2: 2, 3: 1, 4: 4, 5: 5, 6: 6, 7: 7,
                                                 **{8 + k: 16 + k for k in range(8)}}),
    "aarch64": PerfRegisterLayout(32, 31, 29, 30, {k: k for k in range(31)}),
    "s390x": PerfRegisterLayout(33, 15, 11, 14, {k: k for k in range(16)}),
}
ABI_OF_ARCH = {"x86_64": ABI.AMD64_ENDIAN_LITTLE, "aarch64": ABI.AARCH64_ENDIAN_LITTLE,
               "s390x": ABI.S390X_ENDIAN_BIG}


@record_class
class UnwoundSample:
    sample: Sample
    comm: str
    unwind: Unwind
    #: The mapping of each frame's pc (None: unmapped).
    mappings: list[Mapping | None]
    #: The layout (``AddressSpace.version``) the sample was unwound in: within one, a
    #: frame's printed pc decides its mapping.
    layout: int = 0


_positions_cache: dict[tuple[str, int], tuple[int, int, int, int, dict[int, int]]] = {}


def _positions(arch: str, mask: int) -> tuple[int, int, int, int, dict[int, int]]:
    """Where ip, sp, fp, lr and each DWARF register sit in a sample's register array
    (-1: not recorded), for one register mask (computed once per mask)."""
    key = (arch, mask)
    found = _positions_cache.get(key)
    if found is None:
        layout = PERF_REGS[arch]
        position: dict[int, int] = {}
        for bit in range(64):
            if mask >> bit & 1:
                position[bit] = len(position)

        def at(perf_index: int | None) -> int:
            return -1 if perf_index is None else position.get(perf_index, -1)

        dwarf = {number: position[perf] for number, perf in layout.dwarf.items()
                 if perf in position}
        found = (at(layout.ip), at(layout.sp), at(layout.fp), at(layout.lr), dwarf)
        _positions_cache[key] = found
    return found


def sample_registers(sample: Sample, arch: str) -> Registers | None:
    """The sample's user registers in tracer form (``None`` without REGS_USER)."""
    regs = sample.regs
    if not regs or sample.attr is None:
        return None
    ip, sp, fp, lr, dwarf = _positions(arch, sample.attr.sample_regs_user)
    return Registers(regs[ip] if ip >= 0 else 0, regs[sp] if sp >= 0 else 0,
                     regs[fp] if fp >= 0 else 0, regs[lr] if lr >= 0 else 0,
                     sampled=(regs, dwarf))


class PerfUnwinder:
    """Streams the unwound samples of a recording, in ``perf script`` order."""

    #: Whether the topmost frames of the samples ahead are planned at once (see
    #: :meth:`_plan_ahead`; not by a session that does not unwind its samples one by one).
    plans_ahead = True

    def __init__(self, data: PerfData, binaries: Iterable[str] = (), max_depth: int = 127,
                 use_cache: bool = True, problems: Problems | None = None,
                 merge_callchains: bool = True, tables: TableProvider | None = None) -> None:
        self.data = data
        #: Deferred user callchains (perf >= 6.19) joined to their samples, or shown
        #: apart; None when the recording defers none.
        self.stitcher = (Stitcher(merge_callchains)
                         if defers_callchains(attr.flags for attr in data.attrs) else None)
        self.arch = data.arch or "x86_64"
        if self.arch not in PERF_REGS:
            raise ValueError(f"unsupported architecture {self.arch}")
        #: The build-id table of the recording's header (``perf buildid-list``) by file.
        self.build_ids = build_ids = recorded_build_ids(data)
        self.finder, self.debug_files = binary_finder(build_ids, binaries, problems,
                                                      tables or GeneratedTables(use_cache))
        self.problems = problems
        #: JIT code read from jitdump files, by the dump's path.
        self._jitdumps: dict[str, list[Mapping]] = {}
        # -g, -a -g and recordings without callchains have no stack copies to unwind.
        self.finder.symbols_only = not any(attr.sample_type & SAMPLE_STACK_USER
                                           for attr in data.attrs)
        self.unwinder = Unwinder(ABI_OF_ARCH[self.arch], max_depth)
        self.spaces: dict[int, AddressSpace] = {}
        #: The topmost frames planned ahead, not yet asked for (:meth:`frames_ahead`).
        self._ahead: list[tuple[int, int, Mapping | None]] = []
        #: The first sample's file offset (:meth:`from_first_sample`), and where the
        #: samples from it were planned up to before the run went on (:meth:`plan_meanwhile`).
        self._first_offset: int | None = None
        self._first_looked = 0
        #: Non-executable mappings per process, to name recorded frames that point there.
        self.data_spaces: dict[int, AddressSpace] = {}
        self.comms: dict[int, str] = {}
        #: Each process's program: the mapping of its executable (see
        #: :meth:`_note_executable`), the last one when it exec'd more than once.
        self.executables: dict[int, Mapping] = {}
        #: Processes that exec'd and whose new program's mapping is still to come.
        self._exec_pending: set[int] = set()
        #: The recorded vDSO's build id; our own vDSO is used when it has the same one.
        self.vdso_id = build_ids.get(VDSO)
        #: The build ids (None: a recording without) the vDSO was looked at for.
        self._vdso_given: set[bytes | None] = set()
        self._own_vdso: ElfImage | bool | None = False  # False: not read yet
        #: Time spent unwinding (samples() adds to it when it is not None).
        self.unwind_seconds: float | None = None
        #: Which samples samples() gives (perf's --pid, --tid, --comms, --time); the
        #: others are not unwound. None: all.
        self.keep: SampleFilter | None = None
        #: Called with each side-band record once the session has followed it: a model of
        #: the processes' memory (``deferred.what_if``) follows their exec, fork and mmap.
        self.side_band_observers: list[Callable[[Record], None]] = []

    def _give_vdso(self, build_id: bytes | None) -> None:
        """Give the finder this process's vDSO (read from memory, no file) for ``[vdso]``
        with ``build_id`` when it is the recorded one, for its CFI and symbols; otherwise
        ``[vdso]`` is looked for as any binary (perf's build-id cache). It is the recorded
        one when the build ids are the same or, in a recording without build ids (``perf
        record -B``), when the recording names the running kernel's release: perf then
        takes its own vDSO whatever kernel made the recording, and names another kernel's
        frames after this one's code; we leave those unknown. (A copy in a temporary file
        cost ~1 ms of every run: a directory made and removed, a finalizer.)"""
        if build_id in self._vdso_given:
            return
        self._vdso_given.add(build_id)
        if build_id is None and not self._recorded_on_this_kernel():
            return
        if self._own_vdso is False:
            self._own_vdso = own_vdso_image()
        image = self._own_vdso
        if isinstance(image, ElfImage) and (build_id is None or image.build_id() == build_id):
            self.finder.give(VDSO, build_id, image)

    def _recorded_on_this_kernel(self) -> bool:
        """Whether the recording names the running kernel's release (``uname -r``)."""
        release = getattr(self.data, "os_release", None)
        return bool(release) and release == os.uname().release

    def _space(self, pid: int) -> AddressSpace:
        space = self.spaces.get(pid)
        if space is None:
            space = self.spaces[pid] = AddressSpace()
        return space

    def samples(self, first: int = 0, last: int | None = None,
                ordered: Iterator[Record] | None = None) -> Iterator[UnwoundSample]:
        """The unwound samples, in order; with ``first`` and ``last``, only the samples
        numbered ``first`` to ``last`` (excluded) in that order, the records before them
        followed all the same, from ``ordered`` (:meth:`from_first_sample`) if given: for
        a recording that defers no callchain, unfiltered, a worker's share of ``script
        -j``."""
        if first or last is not None or ordered is not None:
            assert self.stitcher is None and self.keep is None
            yield from self._numbered(first, last, ordered or time_ordered(self.data))
            return
        clock = perf_counter if self.unwind_seconds is not None else None
        records: Iterable[Record] = time_ordered(self.data)
        if self.stitcher is not None:
            records = self.stitcher.stitched(records)
        keep = self.keep
        # (with a filter or deferred callchains, many samples are not unwound)
        ahead_at = 0 if self.plans_ahead and keep is None and self.stitcher is None else _NEVER
        for record in records:
            if isinstance(record, CallchainDeferred):
                unwound = self._deferred_record(record)
                if keep is None or keep.keeps(unwound.sample, unwound.comm):
                    yield unwound
            elif isinstance(record, Sample):
                if record.offset >= ahead_at:
                    ahead_at = self._plan_ahead(record.offset, PLAN_AHEAD)[0]
                if keep is not None and not keep.keeps(record, self.comm_of(record)):
                    continue
                if clock is None:
                    yield self._unwind(record)
                    continue
                begin = clock()
                unwound = self._unwind(record)
                self.unwind_seconds += clock() - begin  # type: ignore[operator]
                yield unwound
            else:
                self.side_band(record)

    def from_first_sample(self) -> Iterator[Record]:
        """The records in ``perf script`` order from the first sample on, the side band
        before it applied: the state ``script -j`` forks its workers in (a binary mapped
        before the first sample is opened, and a damaged table of it reported, once)."""
        records = time_ordered(self.data)
        for record in records:
            if isinstance(record, Sample | CallchainDeferred):
                self._first_offset = record.offset
                return chain([record], records)
            self.side_band(record)
        return iter(())

    def plan_meanwhile(self, count: int, waiting: Callable[[], bool]) -> None:
        """Plan the topmost frames of the first ``count`` samples from the first one (see
        :meth:`_plan_ahead`), :data:`MEANWHILE` at a time, while ``waiting()`` says this
        process would otherwise wait (before a ``-j`` fork, for a first run's symbols
        helper): the functions they need are made once for every worker, and the first
        share's plans are ready. The share that starts with the first sample goes on
        from where this look stopped (:meth:`_numbered`)."""
        offset = self._first_offset
        if offset is None or not self.plans_ahead:
            return
        planned, count = 0, min(count, PLAN_AHEAD)
        while planned < count and offset < _NEVER and waiting():
            offset, found = self._plan_ahead(offset, min(MEANWHILE, count - planned))
            planned += found
            self._first_looked = offset

    def _numbered(self, first: int, last: int | None, records: Iterator[Record]
                  ) -> Iterator[UnwoundSample]:
        # The samples before ``first`` are only followed (counted, in time order): read as
        # such from the file (PerfData.follow); one read so but delivered at or past
        # ``first`` (the order holds records read up to two rounds earlier) is read whole.
        data = self.data
        following = first > 0
        data.follow(following)
        if following:  # (the first share's frames, planned before the fork, are not ours)
            self._ahead = []
        try:
            number = 0
            ahead_at = (_NEVER if not self.plans_ahead else 0 if following
                        else self._first_looked)
            for record in records:
                deferred = isinstance(record, CallchainDeferred)  # (shown apart, as samples)
                if not deferred and not isinstance(record, Sample) and type(
                        record) is not Followed:
                    self.side_band(record)
                    continue
                if last is not None and number >= last:
                    return
                if number >= first:
                    if following:
                        data.follow(following := False)
                    if type(record) is Followed:
                        record = data.record_at(record.offset, None)  # type: ignore[assignment]
                    if type(record) is Sample and self.unwind_seconds is None:  # (most)
                        if record.offset >= ahead_at:
                            ahead_at = self._plan_ahead(record.offset, PLAN_AHEAD if last is None
                                                        else min(last - number, PLAN_AHEAD))[0]
                        yield self.unwind_in(record, self._space(record.pid),
                                             self.comm_of(record))
                    elif isinstance(record, Sample | CallchainDeferred):  # (else: the file
                        yield self._timed_unwind(record, deferred)       # changed since)
                number += 1
        finally:
            data.follow(False)

    def _plan_ahead(self, offset: int, count: int) -> tuple[int, int]:
        """Decide at once how the topmost frames of the ``count`` samples from the record at
        ``offset`` (in the file's order; :data:`AHEAD_SPAN` bytes at most) are unwound:
        their ips glanced at in the file (:meth:`~.perf_data.PerfData.samples_ahead`), each
        planned in its process's current layout (:meth:`.Unwinder.plan_ahead`): the same
        plans their samples would make, in a fraction of the time (a first run makes their
        functions too, one after another). A process that maps other code by then plans
        its frames as they come. Returns the file offset from which a sample starts the
        next look (:data:`_NEVER`: none), and how many samples this one saw."""
        found, stopped = self.data.samples_ahead(offset, count, AHEAD_SPAN)
        ips: dict[int, list[int]] = {}
        for pid, ip in found:
            if ip < KERNEL_START:
                ips.setdefault(pid, []).append(ip)
        for pid, planned in ips.items():
            space = self.spaces.get(pid)
            if space is not None:
                self._ahead += [(space.version, pc, mapping) for pc, mapping
                                in self.unwinder.plan_ahead(space, planned)]
        if len(self._ahead) > PLAN_AHEAD:  # (nobody asks for them: the latest kept)
            del self._ahead[:-PLAN_AHEAD]
        return (_NEVER if stopped is None or stopped <= offset else stopped), len(found)

    def frames_ahead(self) -> list[tuple[int, int, Mapping | None]]:
        """The topmost frames planned ahead since this was last asked (and forgotten
        here): (layout, pc, mapping), as their samples will give them (the layout is
        :attr:`UnwoundSample.layout`), for their text to be made in a row too."""
        frames, self._ahead = self._ahead, []
        return frames

    def _timed_unwind(self, record: Sample | CallchainDeferred, deferred: bool
                      ) -> UnwoundSample:
        begin = perf_counter()
        unwound = (self._deferred_record(record) if deferred  # type: ignore[arg-type]
                   else self._unwind(record))  # type: ignore[arg-type]
        if self.unwind_seconds is not None:
            self.unwind_seconds += perf_counter() - begin
        return unwound

    def side_band(self, record: Record) -> None:
        """Follow the process model: MMAP/MMAP2 map code, COMM names, FORK copies."""
        if isinstance(record, Mmap):
            if record.executable and is_jitdump(record.filename):
                self._jit_code(record)  # the marker mapping of a JIT's jitdump
            elif record.executable and anonymous_code(record.filename):
                self._anonymous_code(record)
            elif record.executable:
                path, build_id = record.filename, record.build_id
                if path == VDSO:
                    build_id = build_id or self.vdso_id
                    self._give_vdso(build_id)
                module = self.finder.module(path, build_id, record.start, record.pgoff)
                mapping = Mapping(record.start, record.start + record.length, record.pgoff,
                                  record.filename, record.build_id, module)
                self._space(record.pid).add(mapping)
                self._note_executable(record.pid, mapping)
            else:
                self._data_map(record)
        elif isinstance(record, Comm):
            # An exec's new image: its MMAP2 records follow and replace the old mappings
            # they overlap (the others stay: see the module's docstring).
            self.comms[record.tid] = record.comm
            if record.exec:
                self._exec_pending.add(record.pid)
        elif isinstance(record, Task) and not record.exit:
            if record.pid != record.ppid and record.ppid in self.executables:
                self.executables[record.pid] = self.executables[record.ppid]
            if record.pid != record.ppid and record.ppid in self.spaces:
                self.spaces[record.pid] = self.spaces[record.ppid].copy()
            if record.pid != record.ppid and record.ppid in self.data_spaces:
                self.data_spaces[record.pid] = self.data_spaces[record.ppid].copy()
            self.comms.setdefault(record.tid, self.comms.get(record.ptid, ""))
        for observer in self.side_band_observers:
            observer(record)

    def _note_executable(self, pid: int, mapping: Mapping) -> None:
        """Note the process's program: the first file mapped executable after its exec
        (the kernel maps the program before its interpreter, ld.so), or, for a process
        whose exec was not recorded, the first one recorded (perf synthesizes a running
        process's mappings in address order: the program's below its libraries')."""
        if mapping.filename.startswith("["):  # [vdso], [uprobes] ...
            return
        if pid in self._exec_pending or pid not in self.executables:
            self.executables[pid] = mapping
            self._exec_pending.discard(pid)

    def _anonymous_code(self, record: Mmap) -> None:
        """Executable memory of no file (a JIT's code: V8's, the JVM's ...): a mapping with
        no rules, named as perf names it (:func:`perf_map_name`, its addresses shown as
        they are), so that a frame there is one (reached by the frame pointer, left by it)
        rather than the end of the chain. Code a JIT described (jitdump, the GDB JIT
        interface) stays over it: the dump is read whole, before its code's pages may be
        mapped."""
        space = self._space(record.pid)
        described = [mapping for mapping in space.overlapping(record.start,
                                                              record.start + record.length)
                     if mapping.filename == JIT_FILENAME]
        space.add(Mapping(record.start, record.start + record.length, record.start,
                          perf_map_name(record.pid), None))
        space.add_all(described)

    def _jit_code(self, record: Mmap) -> None:
        """The code a jitdump describes, as mappings of the process (the dump read once;
        its problems reported once)."""
        found = self._jitdumps.get(record.filename)
        if found is None:
            from ..sources.jitdump import read_jitdump
            from .jitdump import jitdump_mappings  # here: it imports the generator (~12 ms)

            loads, problems = read_jitdump(record.filename)
            mappings, more = jitdump_mappings(loads, record.filename)
            found = self._jitdumps[record.filename] = mappings
            for problem in problems + more:
                if self.problems is not None:  # costs the dump's frames, not the run
                    self.problems.add(PysframeError(problem))
        self._space(record.pid).add_all(found)

    def _deferred_record(self, record: CallchainDeferred) -> UnwoundSample:
        """A deferred callchain shown apart (``--no-merge-callchains``), as a pseudo-sample
        whose recorded chain is the user part."""
        attr = self.data.attrs[0] if self.data.attrs else None
        sample = Sample(record.offset, 2, record.ips[0] if record.ips else 0, record.pid,
                        record.tid, record.time, cpu=record.cpu,
                        callchain=(PERF_CONTEXT_USER, *record.ips), attr=attr,
                        deferred_record=record.cookie)
        return self._unwind(sample)

    def _data_map(self, record: Mmap) -> None:
        """A mapping of data (``mmap_data``: heap, stack, anonymous memory, files' data),
        kept only to name a recorded frame that points there as perf names it: anonymous
        memory with its absolute address (perf maps it 1:1), files at their offset."""
        name = record.filename
        anonymous = name.startswith(("[stack", "//anon", "/dev/zero", "/anon_hugepage")) or (
            name == "[heap]")
        space = self.data_spaces.get(record.pid)
        if space is None:
            space = self.data_spaces[record.pid] = AddressSpace()
        space.add(Mapping(record.start, record.start + record.length,
                          record.start if anonymous else record.pgoff, name, None))

    def comm_of(self, sample: Sample) -> str:
        """The sample's thread name, as perf names it."""
        return (self.comms.get(sample.tid) or (self.comms.get(sample.pid) if sample.tid >= 0
                                               else None) or default_comm(sample))

    def _unwind(self, sample: Sample) -> UnwoundSample:
        return self.unwind_in(sample, self._space(sample.pid), self.comm_of(sample))

    def unwind_in(self, sample: Sample, space: AddressSpace, comm: str) -> UnwoundSample:
        """The sample unwound in ``space`` (its process's, as it was then), named ``comm``."""
        registers = sample_registers(sample, self.arch) if sample.stack else None
        if registers is None or sample.stack is None:
            # No user registers and stack copy (a `-g`/LBR recording, a kernel thread, a
            # recording without callchains): the user frames the kernel recorded, if any.
            unwind = recorded_frames(sample, space, self.unwinder.max_depth)
            data = self.data_spaces.get(sample.pid)
            if data is not None and None in unwind.mappings:
                named = [mapping if mapping is not None or pc >= KERNEL_START
                         else data.find(pc) for mapping, pc in zip(unwind.mappings, unwind.pcs,
                                                                    strict=False)]
                if named != unwind.mappings:
                    unwind.mappings[:len(named)] = named
                    # Lines cached per layout would not see the data mappings: none kept.
                    return UnwoundSample(sample, comm, unwind, unwind.mappings, 0)
        else:
            memory = StackMemory(registers.sp, sample.stack, self.arch == "s390x")
            unwind = self.unwinder.unwind(registers, memory, space)
        return UnwoundSample(sample, comm, unwind, unwind.mappings, space.version)


#: The callchain contexts perf 6.1 knows (HV, KERNEL, USER, GUEST, GUEST_KERNEL,
#: GUEST_USER). Any other value >= -4095 makes perf drop the whole recorded chain: a
#: frame-pointer walk can copy such a value from a user stack (-160 is common), and perf
#: then prints the header alone.
KNOWN_CONTEXTS = frozenset((1 << 64) - value for value in (32, 128, 512, 2048, 2176, 2560,
                                                            640))


def valid_callchain(callchain: tuple[int, ...]) -> bool:
    """Whether perf prints the recorded callchain (no unknown context marker in it; the
    cookie after USER_DEFERRED is no marker, whatever its value)."""
    if PERF_CONTEXT_USER_DEFERRED in callchain:
        callchain = kernel_part(callchain)
    return all(address < CONTEXT_MARKER_MIN or address in KNOWN_CONTEXTS
               for address in callchain)


VDSO = "[vdso]"


def anonymous_code(name: str) -> bool:
    """Whether an executable mapping of ``name`` is memory of no file, as perf 6.1 tells
    (``map__new``: anonymous memory, or a stack, heap or SysV segment)."""
    return name == "//anon" or name.startswith(("/dev/zero", "/anon_hugepage", "[stack",
                                                "/SYSV")) or name == "[heap]"


def perf_map_name(pid: int) -> str:
    """perf's name for a process's executable anonymous memory: the perf map file a JIT
    may write its symbols to (perf reads it when it exists; we do not)."""
    return f"/tmp/perf-{pid}.map"


def own_vdso_image() -> ElfImage | None:
    """This process's vDSO as a binary (named ``[vdso]``), or None."""
    image = own_vdso()
    if image is None:
        return None
    try:
        return ElfImage(VDSO, image)
    except ElfError:
        return None


def own_vdso() -> bytes | None:
    """The bytes of this process's vDSO (the running kernel's), or None."""
    try:
        maps = read_text("/proc/self/maps", 1 << 20)
    except PysframeError:
        return None
    for line in maps.splitlines():
        if line.endswith(VDSO):
            start, end = (int(value, 16) for value in line.split()[0].split("-"))
            # Read through /proc/self/mem, not ctypes (~1.3 ms to import for this alone).
            try:
                descriptor = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                image = os.pread(descriptor, end - start, start)
            except OSError:
                return None
            finally:
                os.close(descriptor)
            return image if len(image) == end - start else None
    return None


def default_comm(sample: Sample) -> str:
    """perf's name for a thread no COMM record named: the idle task (tid 0) is "swapper",
    any other ":TID"."""
    return "swapper" if sample.tid == 0 else f":{sample.tid}"


def recorded_frames(sample: Sample, space: AddressSpace, limit: int | None = None) -> Unwind:
    """The user part of the sample's recorded callchain (after PERF_CONTEXT_USER; printed
    as recorded, return addresses unadjusted, as perf does), or, for a recording without
    callchains, the sample's ip alone (as frame 0, whatever its mode). ``limit``: perf's
    --max-stack, the most entries of the chain, kernel ones first (its context markers
    not counted)."""
    if sample.attr is not None and sample.attr.sample_type & SAMPLE_STACK_USER and (
            sample.deferred_record is None):
        # The user part was to come from the stack copy, and this one has none (a thread
        # in execve, a kernel thread): perf prints no user frames.
        return Unwind(stop=Stop.NO_STACK)
    unwind = Unwind(stop=Stop.RECORDED)
    if sample.attr is None or not sample.attr.sample_type & SAMPLE_CALLCHAIN:
        unwind.stop = Stop.NO_CALLCHAIN
        unwind.add(sample.ip, FrameMethod.IP)
        unwind.mappings.append(None if sample.ip >= KERNEL_START else space.find(sample.ip))
        return unwind
    if not valid_callchain(sample.callchain):
        return unwind
    user = False
    addresses = []
    others = 0  # the kernel's (and a guest's) entries
    for address in sample.callchain:
        if address >= CONTEXT_MARKER_MIN:
            user = address == PERF_CONTEXT_USER
        elif user:
            addresses.append(address)
        else:
            others += 1
    if limit is not None:
        del addresses[max(limit - others, 0):]
    if sample.attr.lbr_callstack and PERF_CONTEXT_USER in sample.callchain and sample.branches:
        # LBR call stack (--call-graph lbr), as perf builds it: the newest call's target,
        # then every call site, newest first.
        addresses = [sample.branches[0][1], *(source for source, _ in sample.branches)]
    for address in addresses:
        unwind.add(address, FrameMethod.RECORDED if unwind.pcs else FrameMethod.IP)
        unwind.mappings.append(space.find(address))
    return unwind


#: How far into a recording's records :func:`recorded_files` looks for mappings: the
#: binaries of the processes that exist at the start, and those the recorded command
#: loads first, are mapped there; a later one gets its table when it is mapped.
SCAN_LIMIT = 64 << 20


def recorded_files(data: PerfData, records: Iterable[Record] | None = None
                   ) -> list[tuple[str, bytes | None]]:
    """(path, build id) of the user-space ELF files a recording maps or has build ids
    for (the start of the records only, see :data:`SCAN_LIMIT`). ``records``: the
    recording's records, read already (any order: those past the limit are left out, the
    others taken in file order); else the start of the file is read for its mappings."""
    found: dict[str, bytes | None] = {
        entry.filename: entry.build_id for entry in data.build_ids() if not entry.kernel}
    end = data.data_offset + SCAN_LIMIT
    if records is None:
        records = data.records(frozenset((RECORD_MMAP, RECORD_MMAP2)), until=end)
    else:
        records = sorted((record for record in records
                          if isinstance(record, Mmap) and record.offset < end),
                         key=lambda record: record.offset)
    for record in records:
        if isinstance(record, Mmap) and record.executable:
            found.setdefault(record.filename, record.build_id)
    return [(name, build_id) for name, build_id in found.items()
            if name.startswith("/") and not name.endswith(".ko")]
