"""The stack tracer: an address space of modules, SFrame rules, frame-pointer fallback.

The API is the names below, imported from here (loaded on first use):
:class:`Unwinder` (one frame at a time, SFrame first, frame pointers as fallback, explicit
:class:`Stop` reasons) reading a thread's stack through a :class:`StackReader`; the data
model later stages read (:class:`AddressSpace`, :class:`Mapping`, :class:`Module`);
:class:`BinaryFinder` (binaries by build id, their tables from a :class:`TableProvider`
the caller passes: :class:`OwnSections`, or ``pysframe.session.GeneratedTables``).

This stage reads tables and stacks and makes neither: it imports nothing from
``generate``, ``sources``, ``report``, ``record``, ``cli`` or ``rich`` (a recording's
samples are fed to it by ``pysframe.session``; ``tests/test_layers.py`` holds it to that).
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .address_space import AddressSpace, Mapping, Module
    from .memory import StackMemory, StackReader
    from .modules import BinaryFinder
    from .provider import NoTable, OwnSections, TableProvider
    from .unwinder import EXACT_PC, Frame, FrameMethod, Registers, Stop, Unwind, Unwinder

_HOMES = {
    "AddressSpace": ".address_space",
    "Mapping": ".address_space",
    "Module": ".address_space",
    "StackMemory": ".memory",
    "StackReader": ".memory",
    "BinaryFinder": ".modules",
    "NoTable": ".provider",
    "OwnSections": ".provider",
    "TableProvider": ".provider",
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
    "NoTable",
    "OwnSections",
    "Registers",
    "StackMemory",
    "StackReader",
    "Stop",
    "TableProvider",
    "Unwind",
    "Unwinder",
]

__getattr__ = lazy_exports(__name__, _HOMES)
