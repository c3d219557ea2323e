"""The stack tracer: an address space of modules, SFrame rules, frame-pointer fallback.

The API is the names below, imported from here (loaded on first use):
:class:`Unwinder` (one frame at a time, SFrame first, frame pointers as fallback, explicit
:class:`Stop` reasons) reading a thread's stack through a :class:`StackReader`; the data
model later stages read (:class:`AddressSpace`, :class:`Mapping`, :class:`Module`);
:class:`BinaryFinder` (binaries and their tables by build id); :class:`PerfUnwinder`
(the samples of a perf.data recording).
"""

from typing import TYPE_CHECKING

from ..exports import lazy_exports

if TYPE_CHECKING:
    from .address_space import AddressSpace, Mapping, Module
    from .memory import StackMemory, StackReader
    from .modules import BinaryFinder
    from .perf_session import PerfUnwinder, UnwoundSample, sample_registers
    from .unwinder import EXACT_PC, Frame, FrameMethod, Registers, Stop, Unwind, Unwinder

_HOMES = {
    "AddressSpace": ".address_space",
    "Mapping": ".address_space",
    "Module": ".address_space",
    "StackMemory": ".memory",
    "StackReader": ".memory",
    "BinaryFinder": ".modules",
    "PerfUnwinder": ".perf_session",
    "UnwoundSample": ".perf_session",
    "sample_registers": ".perf_session",
    "EXACT_PC": ".unwinder",
    "Frame": ".unwinder",
    "FrameMethod": ".unwinder",
    "Registers": ".unwinder",
    "Stop": ".unwinder",
    "Unwind": ".unwinder",
    "Unwinder": ".unwinder",
}

__all__ = [
    "EXACT_PC",
    "AddressSpace",
    "BinaryFinder",
    "Frame",
    "FrameMethod",
    "Mapping",
    "Module",
    "PerfUnwinder",
    "Registers",
    "StackMemory",
    "StackReader",
    "Stop",
    "Unwind",
    "Unwinder",
    "UnwoundSample",
    "sample_registers",
]

__getattr__ = lazy_exports(__name__, _HOMES)
