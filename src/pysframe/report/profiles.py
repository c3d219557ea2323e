"""Aggregated profiles of unwound samples, and the folded-stacks output (FlameGraph).

:func:`collect` reads the samples once into a :class:`Profile`: every distinct frame
(mapping and address) becomes one :class:`Location`, and every distinct stack of
locations (per event, command, process and thread) one entry with its sample count and
summed period. The outputs are made from it: folded stacks and the SVG flame graph
(:mod:`.flamegraph`) by function name, speedscope (:mod:`.speedscope`) by name and file,
pprof (:mod:`.pprof`) by location. Memory grows with the number of distinct stacks, not
samples.

Frame names: the function (``Symbolizer.function``). A frame in a mapped file without a
symbol is named by its function all the same when the file's ``.eh_frame`` knows where
that function starts: ``file+0xoffset``, the file's base name and the offset in the file
of the start (perf script prints frames' addresses as offsets in the file too), so the
frames of one unnamed function are one node and distinct functions stay distinct; else
by the file alone, ``[file]`` (one node per file, not one per instruction address). A
frame in no mapping is ``[unknown]``. Kernel frames are named from the kernel's symbols
when they are available, else ``[kernel.kallsyms]``. A frame keeps its own address
(pprof's locations).

Mappings: a mapped file's build id is the one its MMAP2 record carries (``perf record
--buildid-mmap``: read by the kernel when the file was mapped), else the one of the
recording's build-id table (``perf buildid-list``: perf lists only the files its samples'
addresses hit, not those only in their callchains), else the one of the file found for it.
The profile's main mapping is the program of the process with the most samples (pprof
readers take the first mapping for the profiled binary): see :class:`Recorded`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..elf.debuginfo import DebugFiles
from ..errors import Problems
from ..session.perf import KERNEL_START, UnwoundSample
from ..symbolize.symbolizer import UNKNOWN, Symbolizer
from ..symbolize.symbols import SymbolTable
from ..unwind.address_space import Mapping
from ..unwind.eh_index import function_start
from ..unwind.unwinder import EXACT_PC, Stop
from .event_names import base_event, event_name

CONTEXT_MARKER_MIN = (1 << 64) - 4095
KERNEL_FILE = "[kernel.kallsyms]"
#: Events whose period is time in nanoseconds (software clocks).
CLOCK_EVENTS = ("cpu-clock", "task-clock")


def is_clock(event: str) -> bool:
    """Whether the event of a printed name (``cpu-clock:u``) is a software clock."""
    return base_event(event) in CLOCK_EVENTS


@dataclass(frozen=True, slots=True)
class ProfileMapping:
    """A mapped file as pprof describes it: ``[start, end)`` maps ``filename`` from
    ``pgoff``."""

    filename: str
    build_id: bytes | None
    start: int
    end: int
    pgoff: int


@dataclass(frozen=True, slots=True)
class Location:
    """One distinct frame: its name, the address shown for it (a caller's return address
    minus one, as perf shows it), its mapping (``None``: unmapped, or the kernel);
    ``symbolized``: the name is a symbol's, not made up (``[file]``, ``file+0x...``)."""

    name: str
    address: int
    mapping: ProfileMapping | None
    kernel: bool = False
    symbolized: bool = True

    @property
    def folded_name(self) -> str:
        """The name in folded stacks: kernel frames carry FlameGraph's ``_[k]`` mark."""
        return f"{self.name}_[k]" if self.kernel else self.name


class StackKey(NamedTuple):
    """A stack of one event in one thread (of one command: an exec starts another)."""

    event: int
    comm: str
    pid: int
    tid: int
    #: Location indexes, leaf first.
    stack: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the recording tells beyond the samples' frames: each process's program (its
    executable's mapping, by pid; it may be filled while the samples are read, it is
    looked at once they all are), and the recording's build-id table, by file name."""

    executables: dict[int, Mapping] = field(default_factory=dict)
    build_ids: dict[str, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class Profile:
    """Samples aggregated by stack; see the module docstring."""

    locations: list[Location] = field(default_factory=list)
    #: Event names, in the order first seen.
    events: list[str] = field(default_factory=list)
    #: [sample count, summed period] per stack.
    stacks: dict[StackKey, list[int]] = field(default_factory=dict)
    first_time: int | None = None
    last_time: int | None = None
    #: The program of the process with the most samples (None: not known).
    main: ProfileMapping | None = None

    def thread_samples(self) -> Counter[tuple[int, int]]:
        """Sample counts (every event together) by thread: (pid, tid)."""
        counts: Counter[tuple[int, int]] = Counter()
        for key, (count, _) in self.stacks.items():
            counts[key.pid, key.tid] += count
        return counts

    def name_counts(self) -> Counter[tuple[str, ...]]:
        """Outermost-first stacks of frame names, prefixed by the command, with their
        sample counts (every event together)."""
        counts: Counter[tuple[str, ...]] = Counter()
        names = [location.folded_name for location in self.locations]
        for key, (count, _) in self.stacks.items():
            counts[(key.comm, *(names[index] for index in reversed(key.stack)))] += count
        return counts


class _Collector:
    """Builds a :class:`Profile`: one location per distinct (mapping, address)."""

    def __init__(self, symbolizer: Symbolizer, kernel: SymbolTable | None,
                 max_stack: int | None = None, recorded: Recorded | None = None) -> None:
        self.max_stack = max_stack
        self.profile = Profile()
        self.symbolizer = symbolizer
        self.kernel = kernel
        self.recorded = recorded or Recorded()
        self.location_ids: dict[tuple[int, int], int] = {}
        self.mappings: dict[int, ProfileMapping] = {}
        self.event_ids: dict[str, int] = {}
        #: Kernel locations made before the kernel's names were ready (a first run reads
        #: kallsyms in a child process): named by :meth:`finish`, so no sample waits.
        self.unnamed_kernel: list[int] = []
        ready = getattr(kernel, "ready", None)
        self._kernel_ready: Callable[[], bool] | None = ready

    def location(self, mapping: Mapping | None, pc: int) -> int:
        key = (id(mapping), pc)
        found = self.location_ids.get(key)
        if found is None:
            found = self.location_ids[key] = len(self.profile.locations)
            self.profile.locations.append(self._user_location(mapping, pc))
        return found

    def describe(self, mapping: Mapping) -> ProfileMapping:
        """The mapping as profiles describe it (once per mapping), with its build id (see
        the module's docstring)."""
        described = self.mappings.get(id(mapping))
        if described is None:
            build_id = (mapping.build_id or self.recorded.build_ids.get(mapping.filename)
                        or _file_build_id(mapping))
            described = self.mappings[id(mapping)] = ProfileMapping(
                mapping.filename, build_id, mapping.start, mapping.end, mapping.pgoff)
        return described

    def _user_location(self, mapping: Mapping | None, pc: int) -> Location:
        if mapping is None:
            return Location(UNKNOWN, pc, None, symbolized=False)
        name = self.symbolizer.function(mapping, pc)
        if name == UNKNOWN:
            return Location(unnamed_function(mapping, pc), pc, self.describe(mapping),
                            symbolized=False)
        return Location(name, pc, self.describe(mapping))

    def finish(self) -> Profile:
        """The profile, with its main mapping: the program of the busiest process whose
        program is known, and every kernel location named."""
        locations = self.profile.locations
        for index in self.unnamed_kernel:
            locations[index] = self._kernel_named(locations[index].address)
        self.unnamed_kernel = []
        executables = self.recorded.executables
        by_process: Counter[int] = Counter()
        for (pid, _), count in self.profile.thread_samples().items():
            by_process[pid] += count
        for pid, _ in by_process.most_common():
            mapping = executables.get(pid)
            if mapping is not None:
                self.profile.main = self.describe(mapping)
                break
        return self.profile

    def kernel_location(self, address: int) -> int:
        key = (0, address)  # id() of a live object is never 0
        found = self.location_ids.get(key)
        if found is None:
            found = self.location_ids[key] = len(self.profile.locations)
            ready = self._kernel_ready
            if ready is not None and not ready():
                self.unnamed_kernel.append(found)
                self.profile.locations.append(Location(KERNEL_FILE, address, None,
                                                       kernel=True, symbolized=False))
            else:
                self._kernel_ready = None  # ready once: no more looks
                self.profile.locations.append(self._kernel_named(address))
        return found

    def _kernel_named(self, address: int) -> Location:
        hit = self.kernel.lookup(address) if self.kernel is not None else None
        return Location(hit[0] if hit else KERNEL_FILE, address, None, kernel=True,
                        symbolized=bool(hit))

    def add(self, unwound: UnwoundSample) -> None:
        sample = unwound.sample
        # Leaf first: the kernel's frames (the callchain's kernel part), then user frames.
        stack = [self.kernel_location(address) for address in sample.callchain
                 if 1 << 63 <= address < CONTEXT_MARKER_MIN][:self.max_stack]
        if unwound.unwind.stop is Stop.NO_CALLCHAIN and sample.ip >= KERNEL_START:
            stack.append(self.kernel_location(sample.ip))  # no callchain: the ip alone
        else:
            stack += self._user_frames(unwound)
        event = event_name(sample.attr)
        event_id = self.event_ids.get(event)
        if event_id is None:
            event_id = self.event_ids[event] = len(self.profile.events)
            self.profile.events.append(event)
        key = StackKey(event_id, unwound.comm or UNKNOWN, sample.pid, sample.tid, tuple(stack))
        value = self.profile.stacks.get(key)
        if value is None:
            value = self.profile.stacks[key] = [0, 0]
        value[0] += 1
        value[1] += sample.period
        profile = self.profile
        if profile.first_time is None or sample.time < profile.first_time:
            profile.first_time = sample.time
        if profile.last_time is None or sample.time > profile.last_time:
            profile.last_time = sample.time

    def _user_frames(self, unwound: UnwoundSample) -> list[int]:
        """The locations of the sample's user frames, leaf first."""
        methods = unwound.unwind.methods
        found = []
        for index, (pc, mapping) in enumerate(zip(unwound.unwind.pcs, unwound.mappings,
                                                  strict=True)):
            # callers as return address - 1 (inside the call); signal frames as they are
            if index and methods[index] not in EXACT_PC:
                pc -= 1
            found.append(self.location(mapping, pc))
        return found


def _file_build_id(mapping: Mapping) -> bytes | None:
    """The build id of the file found for the mapping (its note), if one was found."""
    module = mapping.module
    if module is None:
        return None
    if module.build_id:
        return module.build_id
    return module.image.build_id() if module.image is not None else None


def unnamed_function(mapping: Mapping, pc: int) -> str:
    """The name of a function without a symbol: ``file+0xoffset``, the offset in the file
    where the function containing ``pc`` starts, when the file's ``.eh_frame`` has an FDE
    covering ``pc``; else the file alone, ``[file]`` (every such frame of it one node)."""
    base = os.path.basename(mapping.filename) or mapping.filename
    start = function_start(mapping.module, pc) if mapping.module is not None else None
    if start is None:
        return f"[{base}]"
    return f"{base}+{start - mapping.start + mapping.pgoff:#x}"


def collect(samples: Iterable[UnwoundSample], problems: Problems | None = None,
            kernel: SymbolTable | None = None, max_stack: int | None = None,
            recorded: Recorded | None = None, debug: DebugFiles | None = None) -> Profile:
    """The profile of ``samples``; ``kernel``: kallsyms of the recorded kernel, if known;
    ``max_stack``: the most kernel frames kept (the user frames were cut when unwound);
    ``recorded``: the processes' programs and the build-id table; ``debug``: where
    stripped binaries' symbols are found (see :class:`Symbolizer`)."""
    collector = _Collector(Symbolizer(problems, debug=debug), kernel, max_stack, recorded)
    for unwound in samples:
        collector.add(unwound)
    return collector.finish()


def stack_counts(samples: Iterable[UnwoundSample],
                 problems: Problems | None = None) -> Counter[tuple[str, ...]]:
    """Outermost-first stacks of frame names (prefixed by comm), with their sample counts."""
    return collect(samples, problems).name_counts()


def folded(counts: Counter[tuple[str, ...]]) -> str:
    """Brendan Gregg's folded format: ``a;b;c count`` per line."""
    return "".join(f"{';'.join(stack)} {count}\n" for stack, count in sorted(counts.items()))
