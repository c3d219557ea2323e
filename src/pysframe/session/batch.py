"""A recording's samples unwound in chunks by the batch engine
(:mod:`pysframe.unwind.batch`); and :class:`CollectingSession`, which gathers them for the
engine's tests and benches.

The records are read as :class:`~.perf.PerfUnwinder` reads them (perf's order,
the same process model), but a sample with user registers and a stack copy is not
unwound at once: it waits, with its thread name and a snapshot of its address space,
until :data:`CHUNK` samples have gathered; then each snapshot's samples are unwound
together and every sample of the chunk is delivered, in order. The chains are the scalar
tracer's (tests/test_batch_unwind.py and tests/test_script_engines.py hold them to it);
memory stays bounded by the chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from time import perf_counter
from typing import Any

import numpy as np
import numpy.typing as npt

from ..records import record_class
from ..sources.perf_data import Sample
from ..sources.perf_order import time_ordered
from ..unwind.address_space import AddressSpace
from ..unwind.batch import BatchSample, BatchUnwinder
from ..unwind.memory import StackMemory
from ..unwind.unwinder import Registers, Unwind
from .perf import PerfUnwinder, UnwoundSample, recorded_frames, sample_registers

#: Samples unwound together (bounded memory: their stack copies stay mapped meanwhile).
CHUNK = 4096


class _Waiting:
    """A sample waiting for its chunk: what it is delivered with."""

    __slots__ = ("batch", "comm", "sample", "space")

    def __init__(self, sample: Sample, comm: str, space: AddressSpace,
                 batch: BatchSample) -> None:
        self.sample, self.comm, self.space, self.batch = sample, comm, space, batch


class BatchPerfUnwinder(PerfUnwinder):
    """:class:`PerfUnwinder` with the batch engine (x86-64 little-endian recordings)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch = BatchUnwinder(self.unwinder)
        self._file = np.frombuffer(self.data.buffer, np.uint8)
        #: Address-space snapshots by layout (a copy per layout samples were taken in).
        self._snapshots: dict[int, AddressSpace] = {}

    def samples(self) -> Iterator[UnwoundSample]:
        chunk: list[UnwoundSample | _Waiting] = []
        for record in time_ordered(self.data):
            if isinstance(record, Sample):
                chunk.append(self._prepare(record))
                if len(chunk) >= CHUNK:
                    yield from self._unwound(chunk)
                    chunk = []
            else:
                self.side_band(record)
        yield from self._unwound(chunk)

    def _snapshot(self, space: AddressSpace) -> AddressSpace:
        found = self._snapshots.get(space.version)
        if found is None:
            if len(self._snapshots) > 4 * CHUNK:  # a layout per sample: a hostile file
                self._snapshots.clear()
            found = self._snapshots[space.version] = space.copy()
        return found

    def _prepare(self, sample: Sample) -> UnwoundSample | _Waiting:
        """The sample unwound now (nothing to batch), or waiting for its chunk."""
        space = self._space(sample.pid)
        comm = self.comm_of(sample)
        registers = sample_registers(sample, self.arch) if sample.stack else None
        if registers is None or sample.stack is None:
            unwind = recorded_frames(sample, space)
            return UnwoundSample(sample, comm, unwind, unwind.mappings, space.version)
        if self.arch != "x86_64":  # the batch reads little-endian words
            memory = StackMemory(registers.sp, sample.stack, self.arch == "s390x")
            unwind = self.unwinder.unwind(registers, memory, space)
            return UnwoundSample(sample, comm, unwind, unwind.mappings, space.version)
        if sample.stack_offset >= 0:
            batch = BatchSample(registers, sample.stack, sample.stack_offset, self._file)
        else:
            batch = BatchSample(registers, sample.stack)
        return _Waiting(sample, comm, self._snapshot(space), batch)

    def _unwound(self, chunk: list[UnwoundSample | _Waiting]) -> Iterator[UnwoundSample]:
        """The chunk's samples, in order, the waiting ones unwound by snapshot."""
        begin = perf_counter()
        groups: dict[int, list[int]] = {}
        for index, item in enumerate(chunk):
            if isinstance(item, _Waiting):
                groups.setdefault(id(item.space), []).append(index)
        done: list[UnwoundSample | _Waiting] = list(chunk)
        for indices in groups.values():
            waiting = [chunk[index] for index in indices]
            space = waiting[0].space  # type: ignore[union-attr]
            result = self.batch.unwind(space, [w.batch for w in waiting])  # type: ignore[union-attr]
            for position, (index, item) in enumerate(zip(indices, waiting, strict=True)):
                assert isinstance(item, _Waiting)
                unwind = result.unwind(position)
                done[index] = UnwoundSample(item.sample, item.comm, unwind, unwind.mappings,
                                            space.version)
        if self.unwind_seconds is not None:
            self.unwind_seconds += perf_counter() - begin
        for item in done:
            assert isinstance(item, UnwoundSample)
            yield item


@record_class
class Snapshot:
    """The samples of a recording taken in one address-space layout, in recording order
    (``order``: each sample's index in the stream of unwound samples)."""

    space: AddressSpace
    order: list[int]
    samples: list[BatchSample]


class CollectingSession(PerfUnwinder):
    """A :class:`PerfUnwinder` that collects the samples to unwind, grouped by address-space
    snapshot, instead of unwinding them (samples without registers or a stack copy are
    left out). For the batch engine, its tests and benches."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.snapshots: dict[tuple[int, int], Snapshot] = {}
        self._owner: object = None
        self._file: npt.NDArray[np.uint8] | None = None
        self.count = 0

    def _unwind(self, sample: Sample) -> UnwoundSample:
        space = self._space(sample.pid)
        registers = sample_registers(sample, self.arch) if sample.stack else None
        index = self.count
        self.count += 1
        if registers is not None and sample.stack is not None:
            key = (id(space), space.version)
            snapshot = self.snapshots.get(key)
            if snapshot is None:
                snapshot = self.snapshots[key] = Snapshot(space.copy(), [], [])
            snapshot.order.append(index)
            snapshot.samples.append(self._batch_sample(registers, sample.stack))
        return UnwoundSample(sample, "", _EMPTY, [])

    def _batch_sample(self, registers: Registers, stack: memoryview) -> BatchSample:
        """The sample, with its copy's offset in the mapped file when it is a view of it."""
        owner = stack.obj
        if self._owner is not owner:
            self._owner = owner
            try:
                self._file = np.frombuffer(owner, np.uint8)  # type: ignore[call-overload]
            except (TypeError, ValueError):
                self._file = None
        if self._file is None or not len(stack):
            return BatchSample(registers, stack)
        address = np.frombuffer(stack, np.uint8).ctypes.data
        offset = address - self._file.ctypes.data
        if not 0 <= offset <= len(self._file) - len(stack):
            return BatchSample(registers, stack)
        return BatchSample(registers, stack, offset, self._file)

    def collect(self) -> list[Snapshot]:
        """Read the whole recording; the snapshots in order of their first sample."""
        for _ in self.samples():
            pass
        return list(self.snapshots.values())


_EMPTY = Unwind()
