"""Unwinding sessions: what feeds ``unwind``, from a recording, and the tables it is given.

``unwind`` takes its tables through a ``TableProvider`` and its samples as registers and
stack copies; this stage, after it, supplies both. The API is the names below, imported
from here (loaded on first use): :class:`GeneratedTables` (tables generated and cached by
``generate``), :class:`PerfUnwinder` (the samples of a perf.data recording, in ``perf
script`` order, through the recording's process model) and :class:`UnwoundSample`;
:func:`recorded_files` (the binaries a recording maps, to prefetch their tables). The
batch engine's sessions are :mod:`.batch` and :mod:`.vector`.
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .perf import PerfUnwinder, UnwoundSample, recorded_files, sample_registers
    from .tables import GeneratedTables

_HOMES = {
    "GeneratedTables": ".tables",
    "PerfUnwinder": ".perf",
    "UnwoundSample": ".perf",
    "recorded_files": ".perf",
    "sample_registers": ".perf",
}

__all__ = ["GeneratedTables", "PerfUnwinder", "UnwoundSample", "recorded_files",
           "sample_registers"]

__getattr__ = lazy_exports(__name__, _HOMES)
