"""ELF symbols for frames: the symbol (name and offset) at a runtime address of a mapping,
with one symbol table per module and one answer per (module, address). Names are
demangled as perf prints them (``perf script``, every ``report`` format) or, for
``sframe stack``, as gdb prints a frame without DWARF (:mod:`.demangling`)."""

from __future__ import annotations

from ..elf.debuginfo import DebugFiles
from ..errors import Problems, PysframeError
from ..records import NamedTuple
from ..unwind.address_space import Mapping, Module
from .symbols import SymbolTable, load_symbols

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Literal

UNKNOWN = "[unknown]"


class SymbolHit(NamedTuple):
    """The symbol containing an address, and the address's offset into it (a named tuple:
    one is made per distinct frame address, on the hot path)."""

    name: str
    offset: int

    def __str__(self) -> str:
        return f"{self.name}+{self.offset:#x}"


def symbol_text(hit: SymbolHit | None) -> str:
    """``name+0xoff``, as perf prints a frame's symbol, or ``[unknown]``."""
    return UNKNOWN if hit is None else f"{hit.name}+{hit.offset:#x}"


class Symbolizer:
    """ELF symbols by address; a module whose symbols cannot be read loses its names only
    (the error goes to ``problems``, once). ``debug``: where a stripped module's symbols
    are looked for (default: the environment's debug directories and debuginfod
    servers, :meth:`DebugFiles.from_environment`)."""

    def __init__(self, problems: Problems | None = None,
                 names: Literal["perf", "gdb"] = "perf", debug: DebugFiles | None = None
                 ) -> None:
        self.problems = problems
        self.debug = debug if debug is not None else DebugFiles.from_environment()
        self._display: Callable[[str], str] = _displays()[names]
        self._tables: dict[tuple[str, bytes | None], SymbolTable | None] = {}
        # Samples repeat the same frames: one answer per (module, link-time address).
        self._hits: dict[tuple[int, int], SymbolHit | None] = {}

    def table(self, mapping: Mapping) -> SymbolTable | None:
        return self._module_table(mapping.module)

    def read_tables(self, modules: Iterable[Module]) -> None:
        """Read the symbol tables of ``modules`` now (before ``script -j`` forks its
        workers, which then share them rather than each reading them again)."""
        for module in modules:
            self._module_table(module)

    def give_table(self, modules: Iterable[Module], path: str, table: SymbolTable) -> None:
        """Take ``table`` as the symbol table of those of ``modules`` opened from the file
        at ``path`` that have none yet (one this run made in another process)."""
        for module in modules:
            key = (module.path, module.build_id)
            if module.image is not None and module.image.path == path and key not in self._tables:
                self._tables[key] = table

    def _module_table(self, module: Module | None) -> SymbolTable | None:
        if module is None or module.image is None:
            return None
        key = (module.path, module.build_id)
        if key not in self._tables:
            try:
                self._tables[key] = load_symbols(module.image, problems=self.problems,
                                                 debug=self.debug)
            except PysframeError as error:
                if self.problems is not None:
                    self.problems.add(error, module.path)
                self._tables[key] = None
        return self._tables[key]

    def symbol(self, mapping: Mapping | None, address: int) -> SymbolHit | None:
        """The symbol at the runtime ``address`` in ``mapping``, or ``None``; its name
        demangled as this symbolizer's tool prints it."""
        if mapping is None or mapping.module is None:
            return None
        key = (id(mapping.module.image), address - mapping.module.bias)
        if key in self._hits:
            return self._hits[key]
        table = self.table(mapping)
        found = table.lookup(key[1]) if table is not None else None
        hit = None if found is None else SymbolHit(self._display(found[0]), found[1])
        self._hits[key] = hit
        return hit

    def function(self, mapping: Mapping | None, address: int) -> str:
        """The function name alone (for stack aggregation), or ``[unknown]``."""
        hit = self.symbol(mapping, address)
        return UNKNOWN if hit is None else hit.name


def _displays() -> dict[str, Callable[[str], str]]:
    from .demangling import gdb_name, perf_name  # loaded with the first symbolizer only

    return {"perf": perf_name, "gdb": gdb_name}
