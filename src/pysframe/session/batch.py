""":class:`CollectingSession`: a recording's samples gathered by address-space snapshot
for the batch engine (:mod:`pysframe.unwind.batch`), its tests and benches.

The records are read as :class:`~.perf.PerfUnwinder` reads them (perf's order, the same
process model); ``sframe script`` itself unwinds through :mod:`.vector`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..records import record_class
from ..sources.perf_data import Sample
from ..unwind.address_space import AddressSpace
from ..unwind.batch import BatchSample
from ..unwind.unwinder import Registers, Unwind
from .perf import PerfUnwinder, UnwoundSample, sample_registers


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

    #: (nothing is unwound here: no frame is planned ahead)
    plans_ahead = False

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
