"""The data model of a process's code: modules, their mappings, the address space.

Later stages (``symbolize``, ``report``) read frames through these types only;
loading binaries and their SFrame tables is :mod:`.modules`' job.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import count, pairwise

from ..errors import Problems, PysframeError
from ..format.errors import SFrameError
from ..records import field, record_class, replace

TYPE_CHECKING = False
if TYPE_CHECKING:  # types only: the model neither opens files nor decodes tables
    from ..elf import ElfImage
    from ..format.lookup import FrameRow, SFrameLookup
    from .provider import OnDemand


class TableGuard:
    """Whether a module's SFrame table is still trusted. The first lookup that finds the
    table corrupt drops it for good, for every mapping of the module (the kernel's rule: a
    faulting table is removed, never trusted again); the fault is reported once through
    ``problems``, with the file offset when the table is the file's own section."""

    __slots__ = ("fault", "file_offset", "problems")

    def __init__(self, problems: Problems | None = None, file_offset: int | None = None) -> None:
        self.problems = problems
        #: Where the table lies in the file (None: generated, in no file).
        self.file_offset = file_offset
        self.fault: SFrameError | None = None

    def drop(self, error: SFrameError, path: str) -> None:
        self.fault = error
        if self.problems is None:
            return
        where = ""
        if error.offset is not None and self.file_offset is not None:
            where = f" at file offset {self.file_offset + error.offset:#x}"
        elif error.offset is not None:
            where = f" at offset {error.offset:#x} of its generated table"
        self.problems.add(PysframeError(f"SFrame table dropped, frames there fall back to the "
                                        f"frame pointer: {error.message}{where}", path=path))


@record_class
class Module:
    """One ELF file as mapped: ``bias`` = runtime address - link-time address."""

    path: str
    build_id: bytes | None
    bias: int
    lookup: SFrameLookup | OnDemand | None
    origin: str  # ".sframe", "generated", or why there is no table
    image: ElfImage | None = None
    guard: TableGuard = field(default_factory=TableGuard)
    #: When the file's own .sframe is damaged and ``lookup`` reads a table made from its
    #: CFI instead: the fault found in the own table (its offset: in the file).
    damage: PysframeError | None = None

    def find_fre(self, pc: int) -> FrameRow | None:
        """The SFrame row for the runtime ``pc``, or None (no table, no row, or a table
        found corrupt: dropped)."""
        try:
            return self.row(pc)
        except SFrameError as error:
            self.guard.drop(error, self.path)
            return None

    def row(self, pc: int) -> FrameRow | None:
        """:meth:`find_fre` that raises a fault of the table (:class:`SFrameError`) and
        leaves it trusted: for a look ahead, whose fault the frame itself meets later."""
        lookup = self.lookup
        if lookup is None or self.guard.fault is not None:
            return None
        return lookup.find_fre(pc - self.bias)


@record_class
class Mapping:
    """An executable mapping ``[start, end)`` of ``filename`` at file offset ``pgoff``."""

    start: int
    end: int
    pgoff: int
    filename: str
    build_id: bytes | None
    module: Module | None = None

    def code(self, address: int, size: int) -> bytes | None:
        """``size`` bytes of the file as mapped at ``address`` (``None`` if not available)."""
        if self.module is None or self.module.image is None:
            return None
        offset = address - self.start + self.pgoff
        data = self.module.image.data
        if not 0 <= offset <= len(data) - size:
            return None
        return data[offset:offset + size]


#: The file name of a JIT frame's mapping (code in no file: a registered object's, or a
#: jitdump's code load).
JIT_FILENAME = "[jit]"

_LAYOUTS = count(1)


@record_class
class AddressSpace:
    """The executable mappings of one process, sorted by start address."""

    mappings: list[Mapping] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)
    #: A new number at every change, unique in the process (a copy keeps it: same
    #: mappings), so caches keyed by it never see a stale or another space's layout.
    version: int = 0

    def add(self, mapping: Mapping) -> None:
        """Map ``mapping`` over whatever it overlaps (exec, dlclose + dlopen ...); the parts
        of an older mapping outside it stay, as perf keeps them (perf inject --jit maps each
        function's file over the start of the next one's). An empty mapping maps nothing.
        The overlapped run is found by bisection and replaced in place: a JIT's code loads
        in rising addresses cost O(log n) each, not a pass over every mapping."""
        if mapping.end <= mapping.start:
            return
        mappings, starts = self.mappings, self._starts
        low = bisect_right(starts, mapping.start) - 1
        if low < 0 or mappings[low].end <= mapping.start:
            low += 1
        high = bisect_left(starts, mapping.end, low)
        middle = [mapping]
        if low < high:
            first, last = mappings[low], mappings[high - 1]
            if first.start < mapping.start:
                middle.insert(0, replace(first, end=mapping.start))
            if last.end > mapping.end:
                middle.append(replace(last, start=mapping.end,
                                      pgoff=last.pgoff + (mapping.end - last.start)))
        mappings[low:high] = middle
        starts[low:high] = [m.start for m in middle]
        self.version = next(_LAYOUTS)

    def add_all(self, added: list[Mapping]) -> None:
        """:meth:`add` each of ``added`` in turn (a later one over an earlier one), in
        O(n log n) for all of them: a jitdump's million code loads in seconds."""
        if len(added) < 64:
            for mapping in added:
                self.add(mapping)
            return
        merged = sorted([*self.mappings, *(m for m in added if m.end > m.start)],
                        key=_start)
        if any(a.end > b.start for a, b in pairwise(merged)):
            merged = overlaid([*self.mappings, *added])
        self.mappings = merged
        self._starts = [m.start for m in merged]
        self.version = next(_LAYOUTS)

    def overlapping(self, start: int, end: int) -> list[Mapping]:
        """The mappings that overlap ``[start, end)``, in address order."""
        low = max(bisect_right(self._starts, start) - 1, 0)
        high = bisect_left(self._starts, end, low)
        return [m for m in self.mappings[low:high] if m.end > start]

    def find(self, address: int) -> Mapping | None:
        index = bisect_right(self._starts, address) - 1
        if index >= 0 and address < self.mappings[index].end:
            return self.mappings[index]
        return None

    def copy(self) -> AddressSpace:
        return AddressSpace(list(self.mappings), list(self._starts), self.version)


def _start(mapping: Mapping) -> int:
    return mapping.start


def overlaid(layers: list[Mapping]) -> list[Mapping]:
    """The layout of ``layers`` mapped in turn, each over the earlier ones it overlaps
    (what :meth:`AddressSpace.add` does one by one): a sweep over their ends, the latest
    layer covering each stretch on top of a heap."""
    from heapq import heappop, heappush  # (here: a jitdump's many loads only)

    order = sorted((i for i, m in enumerate(layers) if m.end > m.start),
                   key=lambda i: layers[i].start)
    points = sorted({x for i in order for x in (layers[i].start, layers[i].end)})
    result: list[Mapping] = []
    active: list[int] = []  # layer indices, negated: the latest on top
    owner, since, next_start = -1, 0, 0
    for x in points:
        while next_start < len(order) and layers[order[next_start]].start == x:
            heappush(active, -order[next_start])
            next_start += 1
        while active and layers[-active[0]].end <= x:
            heappop(active)
        top = -active[0] if active else -1
        if top != owner:
            if owner >= 0:
                result.append(_part(layers[owner], since, x))
            owner, since = top, x
    return result


def _part(mapping: Mapping, start: int, end: int) -> Mapping:
    """The part of ``mapping`` from ``start`` to ``end``."""
    if start == mapping.start and end == mapping.end:
        return mapping
    return replace(mapping, start=start, end=end, pgoff=mapping.pgoff + (start - mapping.start))
