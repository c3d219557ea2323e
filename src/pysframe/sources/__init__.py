"""Sources of stacks: perf.data recordings, a running process through ptrace, core dumps.

The API is the names below, imported from here (loaded on first use).
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .core import CoreError, CoreFile, CoreMapping, CoreMemory, CoreThread
    from .live import (
        Attached,
        LiveError,
        MapEntry,
        ProcessMemory,
        ThreadState,
        dwarf_registers,
        read_maps,
    )
    from .perf_data import (
        BuildIdEntry,
        Comm,
        EventAttr,
        Lost,
        Mmap,
        PerfData,
        PerfDataError,
        Sample,
        Task,
        in_time_order,
        open_perf_data,
    )

_HOMES = {
    "CoreError": ".core",
    "CoreFile": ".core",
    "CoreMapping": ".core",
    "CoreMemory": ".core",
    "CoreThread": ".core",
    "Attached": ".live",
    "LiveError": ".live",
    "MapEntry": ".live",
    "ProcessMemory": ".live",
    "ThreadState": ".live",
    "dwarf_registers": ".live",
    "read_maps": ".live",
    "BuildIdEntry": ".perf_data",
    "Comm": ".perf_data",
    "EventAttr": ".perf_data",
    "Lost": ".perf_data",
    "Mmap": ".perf_data",
    "PerfData": ".perf_data",
    "PerfDataError": ".perf_data",
    "Sample": ".perf_data",
    "Task": ".perf_data",
    "in_time_order": ".perf_data",
    "open_perf_data": ".perf_data",
}

__all__ = [
    "Attached",
    "BuildIdEntry",
    "Comm",
    "CoreError",
    "CoreFile",
    "CoreMapping",
    "CoreMemory",
    "CoreThread",
    "EventAttr",
    "LiveError",
    "Lost",
    "MapEntry",
    "Mmap",
    "PerfData",
    "PerfDataError",
    "ProcessMemory",
    "Sample",
    "Task",
    "ThreadState",
    "dwarf_registers",
    "in_time_order",
    "open_perf_data",
    "read_maps",
]

__getattr__ = lazy_exports(__name__, _HOMES)
