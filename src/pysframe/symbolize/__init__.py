"""Names for code addresses: ELF symbols as perf chooses them, and gdb's names from DWARF
(inline and tail-call frames), with per-build-id caches.

The API is the names below, imported from here (loaded on first use):
:class:`Symbolizer` (the :class:`SymbolHit` at an address), :class:`FrameNamer` (gdb's
frame names for an address space), :class:`DwarfNames` and its memoized
:class:`CachedDwarfNames`, :func:`load_symbols`, :func:`kernel_symbols_for`, and the C++
demangler functions :func:`demangle` and :func:`cplus_function_name` (gdb's DWARF names),
:func:`perf_name` and :func:`gdb_name` (an ELF symbol as perf and gdb print it).
"""

from ..exports import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .cplus import cplus_function_name, demangle
    from .demangling import gdb_name, perf_name
    from .dwarf import DwarfNames
    from .dwarf_cache import CachedDwarfNames
    from .frames import FrameNamer, FrameNames
    from .kernel import kernel_symbols_for, load_kallsyms
    from .symbolizer import SymbolHit, Symbolizer, symbol_text
    from .symbols import Symbol, SymbolTable, load_symbols

_HOMES = {
    "cplus_function_name": ".cplus",
    "demangle": ".cplus",
    "gdb_name": ".demangling",
    "perf_name": ".demangling",
    "DwarfNames": ".dwarf",
    "CachedDwarfNames": ".dwarf_cache",
    "FrameNamer": ".frames",
    "FrameNames": ".frames",
    "kernel_symbols_for": ".kernel",
    "load_kallsyms": ".kernel",
    "SymbolHit": ".symbolizer",
    "Symbolizer": ".symbolizer",
    "symbol_text": ".symbolizer",
    "Symbol": ".symbols",
    "SymbolTable": ".symbols",
    "load_symbols": ".symbols",
}

__all__ = [
    "CachedDwarfNames",
    "DwarfNames",
    "FrameNamer",
    "FrameNames",
    "Symbol",
    "SymbolHit",
    "SymbolTable",
    "Symbolizer",
    "cplus_function_name",
    "demangle",
    "gdb_name",
    "kernel_symbols_for",
    "load_kallsyms",
    "load_symbols",
    "perf_name",
    "symbol_text",
]

__getattr__ = lazy_exports(__name__, _HOMES)
