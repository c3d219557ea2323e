"""A dwarf recording unwound as arrays, chunk by chunk: the batch pipeline of ``script``.

The samples come from :func:`~pysframe.sources.perf_arrays.sample_arrays` (perf's order,
fields as arrays); the other records drive the same process model as
:class:`~.perf.PerfUnwinder` (its ``side_band``), applied between the samples
they fall between. Each chunk's samples are grouped by address-space snapshot and
unwound by the batch engine from their registers and stack copies in the mapped file.
What the batch leaves (rare rules, signal frames, odd stacks) and samples without
registers or a stack copy are parsed as records and unwound by the scalar tracer, so
every chain is the one :class:`PerfUnwinder` gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from time import perf_counter

import numpy as np
import numpy.typing as npt

from ..records import record_class
from ..sources.perf_arrays import SampleArrays
from ..sources.perf_data import Sample
from ..sources.perf_records import RECORD_SAMPLE
from ..unwind.address_space import AddressSpace
from ..unwind.batch import BatchResult, BatchUnwinder
from .perf import PERF_REGS, PerfUnwinder, UnwoundSample, _positions

#: Samples per chunk: bounds the result matrices (depth 127: ~6 MB) and the mapped pages
#: of their stack copies (~32 MB for 8 KB copies).
CHUNK = 4096
#: The cost rule: the samples of a chunk taken in one address-space layout are unwound by
#: the batch engine when there are at least this many, else one by one by the scalar
#: tracer (the same chains either way). The batch's fixed cost is a few ms a call: on the
#: Lua recording it costs 2.8 ms for 1 sample, 102 us a sample for 64, 36 for 256 and 29
#: for 1,024, against 35-50 us a sample for the scalar tracer.
BATCH_FROM = 256


@record_class
class Group:
    """The batch-unwound samples of a chunk that share one address-space snapshot."""

    space: AddressSpace
    #: Their indices in the chunk.
    rows: npt.NDArray[np.int64]
    result: BatchResult


@record_class
class Chunk:
    """Samples ``start`` to ``end`` of the recording: their thread names, the groups the
    batch unwound and, by index in the chunk, the samples the scalar tracer unwound."""

    start: int
    end: int
    comms: list[str]
    groups: list[Group]
    scalar: dict[int, UnwoundSample]


class VectorSession:
    """Unwinds a recording's :class:`SampleArrays` with ``session``'s process model: the
    samples of a chunk taken in one layout by the batch engine when there are at least
    ``batch_from`` (the cost rule, :data:`BATCH_FROM`), else by the scalar tracer."""

    def __init__(self, session: PerfUnwinder, arrays: SampleArrays,
                 batch_from: int = BATCH_FROM) -> None:
        self.session = session
        self.arrays = arrays
        self.batch_from = batch_from
        self.batch = BatchUnwinder(session.unwinder)
        self._file = np.frombuffer(session.data.buffer, np.uint8)
        attr = arrays.attr
        ip, sp, fp, _, _ = _positions(session.arch, attr.sample_regs_user)
        self._register_positions = (ip, sp, fp) if min(ip, sp, fp) >= 0 else None
        self._next_event = 0

    def chunks(self, first: int = 0, last: int | None = None, size: int | None = None
               ) -> Iterator[Chunk]:
        """The chunks of samples ``first`` to ``last`` (default: all), in order. A range that
        does not start at 0 starts from the process model as the side-band records before
        it leave it (they are applied first: no sample is unwound for them)."""
        total = len(self.arrays.offset)
        last = total if last is None else min(last, total)
        size = size or CHUNK
        data = self.session.data
        self._apply_events(first)
        offsets, sizes = self.arrays.offset, self.arrays.size
        for start in range(first, last, size):
            end = min(start + size, last)
            yield self._chunk(start, end)
            # The mapped pages this chunk read are done with (read back if touched again):
            # the resident set stays the size of a chunk, not of the file. Its records lie
            # between these offsets (perf's order stays close to the file's).
            data.release_range(int(offsets[start:end].min()),
                               int((offsets[start:end] + sizes[start:end]).max()) + 4096)
        if last == total:
            self._apply_events(total + 1)

    def ranges(self, count: int) -> list[tuple[int, int]]:
        """The samples split into at most ``count`` ranges of whole chunks, in order."""
        total = len(self.arrays.offset)
        chunks = max(1, -(-total // CHUNK))
        count = max(1, min(count, chunks))
        bounds = [min(total, (chunks * k // count) * CHUNK) for k in range(count + 1)]
        return [(a, b) for a, b in pairwise(bounds) if b > a] or [(0, 0)]

    def _apply_events(self, before: int) -> None:
        """Apply the side-band records delivered before sample ``before``."""
        events = self.arrays.events
        while self._next_event < len(events) and events[self._next_event][0] < before:
            self.session.side_band(events[self._next_event][1])
            self._next_event += 1

    def _chunk(self, start: int, end: int) -> Chunk:
        begin = perf_counter()
        arrays, session = self.arrays, self.session
        #: Each sample's (thread name, snapshot) as an index into ``described``.
        codes: list[npt.NDArray[np.int64]] = []
        described: list[tuple[str, AddressSpace]] = []
        snapshots: dict[int, AddressSpace] = {}
        events = arrays.events
        position = start
        while position < end:
            self._apply_events(position + 1)
            stop = end
            if self._next_event < len(events):
                stop = min(end, max(events[self._next_event][0], position + 1))
            codes.append(self._describe(position, stop, described, snapshots))
            position = stop
        code = np.concatenate(codes) if codes else np.zeros(0, np.int64)
        comms = [comm for comm, _ in described]
        chunk = Chunk(start, end, list(map(comms.__getitem__, code.tolist())), [], {})
        self._unwind(chunk, code, described)
        if session.unwind_seconds is not None:
            session.unwind_seconds += perf_counter() - begin
        return chunk

    def _describe(self, start: int, end: int, described: list[tuple[str, AddressSpace]],
                  snapshots: dict[int, AddressSpace]) -> npt.NDArray[np.int64]:
        """The thread name and address-space snapshot of samples ``start`` to ``end`` (no
        side-band record falls between them), computed once per thread and added to
        ``described``; each sample's index there."""
        session = self.session
        pids, tids = self.arrays.pid[start:end], self.arrays.tid[start:end]
        # (a thread by its (pid, tid) pair as one number, found for all samples at once)
        keys = (pids.astype(np.int64) << 32) | (tids.astype(np.int64) & 0xFFFFFFFF)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        offset = len(described)
        for pid, tid in zip(pids[first].tolist(), tids[first].tolist(), strict=True):
            space = session._space(pid)
            snapshot = snapshots.get(space.version)
            if snapshot is None:
                snapshot = snapshots[space.version] = space.copy()
            comm = (session.comms.get(tid) or (session.comms.get(pid) if tid >= 0 else None)
                    or ("swapper" if tid == 0 else f":{tid}"))
            described.append((comm, snapshot))
        codes: npt.NDArray[np.int64] = inverse.reshape(-1).astype(np.int64) + offset
        return codes

    def _unwind(self, chunk: Chunk, code: npt.NDArray[np.int64],
                described: list[tuple[str, AddressSpace]]) -> None:
        arrays = self.arrays
        start, end = chunk.start, chunk.end
        plain = arrays.regs_pos[start:end] < 0
        positions = self._register_positions
        if positions is None or self.session.arch != "x86_64":
            plain[:] = True
        else:
            registers = arrays.registers(positions, start, end)
        for index in np.flatnonzero(plain).tolist():
            chunk.scalar[index] = self._scalar(start + index, chunk.comms[index],
                                               described[int(code[index])][1])
        for space, rows in _by_space(code, described, ~plain):
            if len(rows) < self.batch_from:
                for index in rows.tolist():
                    chunk.scalar[index] = self._scalar(start + index, chunk.comms[index], space)
                continue
            pc, sp, fp = (values[rows] for values in registers)
            stacks = (arrays.stack_pos[start:end][rows], arrays.stack_len[start:end][rows],
                      self._file)
            result, handed = self.batch.unwind_arrays(space, pc, sp, fp, stacks)
            for position in handed.tolist():
                index = int(rows[position])
                chunk.scalar[index] = self._scalar(start + index, chunk.comms[index], space)
            chunk.groups.append(Group(space, rows, result))

    def _scalar(self, sample_index: int, comm: str, space: AddressSpace) -> UnwoundSample:
        """Sample ``sample_index`` parsed as a record and unwound by the scalar path."""
        arrays, session = self.arrays, self.session
        offset = int(arrays.offset[sample_index])
        parser = session.data._parser
        assert parser is not None
        sample = parser.parse(session.data.buffer, RECORD_SAMPLE, int(arrays.misc[sample_index]),
                              offset, int(arrays.size[sample_index]), 0)
        assert isinstance(sample, Sample)
        unwound = session.unwind_in(sample, space, comm)
        return unwound


def _by_space(code: npt.NDArray[np.int64], described: list[tuple[str, AddressSpace]],
              taken: npt.NDArray[np.bool_]
              ) -> list[tuple[AddressSpace, npt.NDArray[np.int64]]]:
    """The ``taken`` samples grouped by snapshot: each snapshot with its samples' indices
    in the chunk (in order), the snapshots in the order of their first sample."""
    index_of: dict[int, int] = {}
    spaces: list[AddressSpace] = []
    for _, space in described:
        if index_of.setdefault(id(space), len(spaces)) == len(spaces):
            spaces.append(space)
    indices = np.flatnonzero(taken)
    if len(spaces) == 1 or not len(indices):
        return [(spaces[0], indices)] if len(indices) else []
    space_code = np.array([index_of[id(space)] for _, space in described], np.int64)
    of_sample = space_code[code[indices]]
    order = np.argsort(of_sample, kind="stable")  # (each group's samples stay in order)
    values, starts, counts = np.unique(of_sample[order], return_index=True,
                                       return_counts=True)
    groups = [(spaces[value], indices[order[first:first + count]])
              for value, first, count in zip(values.tolist(), starts.tolist(),
                                             counts.tolist(), strict=True)]
    groups.sort(key=lambda group: int(group[1][0]))
    return groups


__all__ = ["BATCH_FROM", "CHUNK", "PERF_REGS", "Chunk", "Group", "VectorSession"]
