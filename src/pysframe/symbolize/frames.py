"""Frame names as gdb prints them: ELF symbols, and with debug info DWARF names, inline
frames and the frames gdb synthesizes for functions left by a tail call.

:class:`FrameNamer` answers for the frames of one address space. Its DWARF questions go to
a :class:`FrameNames` per module (normally the memoized
:class:`~pysframe.symbolize.dwarf_cache.CachedDwarfNames`, so a warm run reads no DWARF).
"""

from __future__ import annotations

from ..elf.debuginfo import DebugFiles
from ..errors import Problems
from ..records import Protocol
from ..unwind.address_space import AddressSpace, Mapping, Module
from .symbolizer import SymbolHit, Symbolizer
from .symbols import function_addresses

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

if TYPE_CHECKING:
    from ..elf import ElfImage


class FrameNames(Protocol):
    """The DWARF questions frame naming asks of one file (link-time addresses)."""

    def frames_at(self, address: int) -> list[str] | None: ...

    def function_entry(self, address: int) -> int | None: ...

    def call_site_targets(self, return_address: int) -> list[int] | str | None: ...

    def tail_call_chain(self, target_entry: int | Sequence[int], callee_entry: int
                        ) -> list[tuple[str, int]] | None: ...

    def remember(self, question: tuple[Any, ...], compute: Callable[[], Any]) -> Any: ...

    def save(self) -> None: ...


def cached_names(path: str, build_id: bytes | None, debug: DebugFiles | None = None
                 ) -> FrameNames:
    """The memoized DWARF names of ``path`` (the default source of :class:`FrameNamer`),
    its DWARF found through ``debug``."""
    from .dwarf_cache import CachedDwarfNames

    return CachedDwarfNames(path, build_id, debug=debug)


#: A module's identity for the caches here.
ModuleKey = tuple[str, bytes | None]
#: (global, local) function name -> link-time address of one image.
Exported = tuple[dict[str, int], dict[str, int]]


class FrameNamer:
    """Names for the frames of ``space``: ELF symbols always, gdb's DWARF names, inline
    frames and tail-call frames when ``debuginfo`` is set. Symbols and DWARF of stripped
    modules are found through ``debug`` (default: the environment's,
    :meth:`DebugFiles.from_environment`)."""

    def __init__(self, space: AddressSpace, *, debuginfo: bool = True,
                 open_names: Callable[[str, bytes | None], FrameNames] | None = None,
                 problems: Problems | None = None, debug: DebugFiles | None = None) -> None:
        self.space = space
        self.debug = debug if debug is not None else DebugFiles.from_environment()
        self.symbolizer = Symbolizer(problems, names="gdb", debug=self.debug)
        self.debuginfo = debuginfo
        self._open_names = open_names or (
            lambda path, build_id: cached_names(path, build_id, self.debug))
        self._names: dict[ModuleKey, FrameNames] = {}
        self._exported: dict[ModuleKey, Exported] = {}

    def names_of(self, module: Module | None) -> FrameNames | None:
        """The DWARF names of ``module`` (None without debug info or a file)."""
        if not self.debuginfo or module is None or module.image is None:
            return None
        key = (module.path, module.build_id)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = self._open_names(module.path, module.image.build_id())
        return found

    def save(self) -> None:
        """Keep what the DWARF said for the next run."""
        for names in self._names.values():
            names.save()

    def frame(self, mapping: Mapping | None, lookup: int) -> tuple[SymbolHit | None, list[str]]:
        """The ELF symbol at the runtime ``lookup`` address and the frame names there,
        innermost first (inlined calls, then the function); without DWARF the one name is
        the symbol's, or ``[unknown]``."""
        symbol = self.symbolizer.symbol(mapping, lookup)
        names = None
        if mapping is not None and mapping.module is not None:
            dwarf = self.names_of(mapping.module)
            if dwarf is not None:
                names = dwarf.frames_at(lookup - mapping.module.bias)
        if not names:
            names = [symbol.name if symbol is not None else "[unknown]"]
        return symbol, names

    def function_label(self, mapping: Mapping | None, lookup: int,
                       symbol: SymbolHit | None, names: list[str]) -> str:
        """The frame's function as the text prints it: its outermost name with the ELF
        symbol's offset, or, where the symbol does not start at the function's entry
        (the ``.cold`` part of a split function, a ``.part`` clone), the symbol's name
        with it, as gdb prints an address (``<work.cold+17>``): an offset is only ever
        printed after the name of what it counts from."""
        if symbol is None:
            return names[-1]
        if names[-1] != symbol.name and mapping is not None and mapping.module is not None:
            dwarf = self.names_of(mapping.module)
            address = lookup - mapping.module.bias
            entry = dwarf.function_entry(address) if dwarf is not None else None
            if entry is not None and entry != address - symbol.offset:
                return f"{symbol.name}+{symbol.offset:#x}"
        return f"{names[-1]}+{symbol.offset:#x}"

    def tail_calls(self, caller: Mapping | None, return_address: int, callee: Mapping | None,
                   callee_lookup: int) -> list[tuple[str, int]]:
        """The frames gdb synthesizes between a caller (returning to ``return_address``)
        and its callee from DWARF call sites: functions that were left by a tail call
        (``jmp``), innermost first, each with its runtime pc. Remembered in the caller's
        DWARF memo, so a warm run reads no DWARF and no symbol table for them."""
        if caller is None or callee is None or caller.module is None or callee.module is None:
            return []
        caller_names = self.names_of(caller.module)
        callee_names = self.names_of(callee.module)
        if caller_names is None or callee_names is None:
            return []
        caller_pc = return_address - caller.module.bias
        callee_pc = callee_lookup - callee.module.bias
        callee_key = (callee.module.build_id or b"").hex() or callee.module.path

        def compute() -> list[tuple[str, int]]:
            return self._tail_chain(caller, caller_names, caller_pc, callee, callee_names,
                                    callee_lookup)

        chain = caller_names.remember(("tail_frames", caller_pc, callee_key, callee_pc),
                                      compute)
        bias = callee.module.bias
        return [(name, pc + bias) for name, pc in chain]

    def _tail_chain(self, caller: Mapping, caller_names: FrameNames, caller_pc: int,
                    callee: Mapping, callee_names: FrameNames, callee_lookup: int
                    ) -> list[tuple[str, int]]:
        assert caller.module is not None and callee.module is not None
        callee_pc = callee_lookup - callee.module.bias
        targets = caller_names.call_site_targets(caller_pc)
        if targets is None:
            return []
        if isinstance(targets, str):
            # A declaration (often a call into another file): gdb looks the name up in
            # every file, in load order, global symbols first.
            found = self._address_of(targets)
            if found is None or found[0] is not callee.module.image:
                return []
            targets = [found[1]]
        elif caller.module.image is not callee.module.image:
            return []
        callee_entry = callee_names.function_entry(callee_pc)
        if callee_entry is None:  # no DWARF for it: gdb takes the ELF symbol's start
            symbol = self.symbolizer.symbol(callee, callee_lookup)
            if symbol is None:
                return []
            callee_entry = callee_pc - symbol.offset
        if callee_entry in targets:
            return []
        return callee_names.tail_call_chain(targets, callee_entry) or []

    def _address_of(self, name: str) -> tuple[ElfImage, int] | None:
        """(image, link-time address) of function ``name``: the first global definition in
        load order, else the first local one (gdb's minimal-symbol lookup)."""
        tables: list[tuple[ElfImage, Exported]] = []
        for mapping in self.space.mappings:  # the program, then libraries, as loaded
            module = mapping.module
            if module is None or module.image is None:
                continue
            key = (module.path, module.build_id)
            if key not in self._exported:
                self._exported[key] = function_addresses(module.image, self.debug)
            tables.append((module.image, self._exported[key]))
        for scope in (0, 1):  # globals, then locals
            for image, (global_names, local_names) in tables:
                address = (global_names if scope == 0 else local_names).get(name)
                if address is not None:
                    return image, address
        return None
