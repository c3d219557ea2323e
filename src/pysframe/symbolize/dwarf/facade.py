"""The public face of the DWARF reader: :class:`DwarfNames`, gdb's frame names and
tail-call frames for the addresses of one ELF file, and where its DWARF is found."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...elf.debuginfo import DebugFiles
from ..symbols import NamedSymbols, named_symbols
from .call_sites import CHAIN_ERRORS, CallSites, TailCalls
from .frames import Frames
from .info import DWARF_ERRORS
from .names import Names
from .stream import SectionTable, read_section_table
from .units import Units

_T = TypeVar("_T")


class DwarfNames:
    """gdb's frame names (inline frames included) for addresses of one ELF file."""

    def __init__(self, table: SectionTable, debug: DebugFiles | None = None) -> None:
        self._table = table
        #: Where dwz's supplementary file is looked for, by build id.
        self._debug = debug if debug is not None else DebugFiles.from_environment(
            network=False)
        self._dwarf: _Dwarf | None = None
        self._failed = False
        self._cache: dict[int, list[str] | None] = {}

    @property
    def debug_file(self) -> str:
        """The file the DWARF is read from."""
        return self._table.path

    @classmethod
    def open(cls, path: str, build_id: bytes | None, debug: DebugFiles | None = None
             ) -> DwarfNames | None:
        """DWARF for the ELF file `path`: the file itself when it has .debug_info, else the
        file ``debug`` finds (:class:`~pysframe.elf.debuginfo.DebugFiles`: a twin, a
        separate debug file by build id or debug link, a download; None: the local
        search); None when there is none or it cannot be parsed (never raise on bad
        DWARF)."""
        if debug is None:
            debug = DebugFiles.from_environment(network=False)
        try:
            found = debug.find(path, build_id, "dwarf")
            table = read_section_table(found) if found is not None else None
            if table is None or not table.has_dwarf():
                return None
            return cls(table, debug)
        except DWARF_ERRORS:
            return None

    def frames_at(self, address: int) -> list[str] | None:
        """Names for the link-time (ELF virtual) `address`: innermost first — one name per
        inlined subroutine whose ranges contain the address, then the containing subprogram's
        name — exactly the names gdb prints for that pc (the caller frames' pc is already
        return address - 1 when we call this). None when no DWARF subprogram covers it."""
        if address in self._cache:
            cached = self._cache[address]
            return list(cached) if cached is not None else None
        dwarf = self._load()
        names: list[str] | None = None
        if dwarf is not None:
            try:
                names = dwarf.frames.names_at(address)
            except DWARF_ERRORS:
                names = None
        self._cache[address] = names
        return list(names) if names is not None else None

    def function_entry(self, address: int) -> int | None:
        """Entry of the non-inlined subprogram containing the link-time ``address`` (gdb's
        ``get_pc_function_start``: ``block_linkage_function`` then ``block::entry_pc``):
        its DW_AT_low_pc, or with DW_AT_ranges the start of the first range in list order
        (a single range: its start). gdb 13 ignores DW_AT_entry_pc. Look up the frame's pc
        as for :meth:`frames_at` (pc - 1 for callers). None when no DWARF function covers
        it; gdb then takes the ELF symbol's start, which the caller can do."""
        return self._answer(lambda dwarf: dwarf.frames.function_entry(address))

    def call_site_target(self, return_address: int) -> int | str | None:
        """The target of the DW_TAG_call_site (DWARF 5) / DW_TAG_GNU_call_site (DWARF 4)
        whose return pc (DW_AT_call_return_pc; DW_AT_low_pc for GNU call sites) equals the
        link-time ``return_address``, as gdb 13 records it (``read_call_site_scope``) and
        finds it (``call_site_for_pc``: only in the unit of return_address - 1, the first
        such site in DIE order that gdb reads). The first of :meth:`call_site_targets`."""
        targets = self.call_site_targets(return_address)
        if isinstance(targets, list):
            return targets[0]
        return targets

    def call_site_targets(self, return_address: int) -> list[int] | str | None:
        """Like :meth:`call_site_target`, with every address gdb tries.

        The callee is DW_AT_call_target, DW_AT_GNU_call_site_target, DW_AT_call_origin or
        DW_AT_abstract_origin, the first present (each looked up through the site's own
        origin chain, as gdb's ``dwarf2_attr``):

        * a reference to a declaration (DW_AT_declaration without DW_AT_specification):
          the name gdb looks up as a minimal symbol in every object file, in load order,
          global symbols first (``lookup_minimal_symbol``): its DW_AT_linkage_name, else
          (C) its DW_AT_name; a ``str``. :meth:`symbol_address` looks it up in this file.
        * a reference to a function with DW_AT_ranges: the start of each range, in list
          order (gdb's ADDRESSES: the cold part of a split function is one, and since no
          function starts there the tail-call search fails unless the first is the callee).
        * a reference to a function with DW_AT_low_pc: ``[low_pc]``. One without valid pc
          bounds (an abstract instance, as GCC's DW_AT_call_origin is for a function also
          inlined elsewhere) gives None.
        * a DWARF expression, even a constant DW_OP_addr: None. gdb 13 evaluates it only
          with the caller's frame, which ``call_site_find_chain`` never passes: no
          tail-call frames come from such a site (nor from indirect calls).

        None also when there is no such call site (gdb shows no tail-call frame then)."""
        return self._answer(lambda dwarf: dwarf.call_sites.targets(return_address))

    def tail_call_chain(self, target_entry: int | Sequence[int], callee_entry: int
                        ) -> list[tuple[str, int]] | None:
        """gdb's synthesized tail-call frames between a caller whose call site called
        ``target_entry`` (an int, or every address of :meth:`call_site_targets`) and a
        callee frame whose function starts at ``callee_entry`` (:meth:`function_entry`),
        both in this file: innermost (closest to the callee) first, each (name, link-time
        pc) where pc is the return pc of the tail-call site (the address after the jmp).

        gdb 13's rules (``dwarf2_tailcall_sniffer_first`` calls ``call_site_find_chain``
        for every frame the DWARF unwinder makes, with the caller's return address and the
        entry of the frame's function):

        * Tail-call sites are the call sites with DW_AT_call_tail_call / DW_AT_GNU_tail_call
          inside a function (through inlined subroutines and blocks) that has
          DW_AT_call_all_calls, DW_AT_call_all_tail_calls, DW_AT_GNU_all_call_sites or
          DW_AT_GNU_all_tail_call_sites (``read_call_site_scope``): other functions have
          no tail-call list and end every path through them.
        * The search (``call_site_find_chain_2``) is depth first: when one of a site's
          target addresses is the callee's entry the current path is a candidate (its
          other targets are not followed); else for each target address the function that
          starts exactly there (``func_addr_to_tail_call_list``) and each of its tail-call
          sites, the last in DIE order first, not entering a site already on the path
          (cycles and recursion end there; there is no depth limit).
        * Each candidate path is intersected with the first one (``chain_candidate``):
          only the sites all paths share at the start (callers) and at the end (callees)
          stay. Once none is shared gdb gives up: no frame. A first path of length 0 (the
          caller called the callee itself) also gives no frame.
        * Any target gdb cannot resolve without a frame on the way (a DWARF expression,
          no target, a name no object file defines, an address where no function
          starts, e.g. the cold part of a split function) throws NO_ENTRY_VALUE_ERROR,
          which gdb catches: no tail-call frame at all (``call_site_find_chain``).
        * The frames (``pretended_chain_levels``, ``pretend_pc``): the common callees,
          innermost first, then the common callers, innermost first (all sites when every
          path agreed). Each shows the pc after its jmp; its name is looked up at pc - 1
          (``get_frame_address_in_block`` treats tail-call frames as callers) and is the
          innermost function there, an inlined one included (``get_frame_function``:
          no inline frame is made for tail-call frames, the tail-call unwinder comes
          before the inline one).

        [] when ``target_entry`` is ``callee_entry`` or gdb shows no tail-call frame
        (ambiguous paths, a failed search). None when unknown: bad DWARF, a tail call to
        a name this file does not define (gdb would follow it into another object file),
        C++ targets without a linkage name, or more than 100000 sites entered."""
        targets = [target_entry] if isinstance(target_entry, int) else list(target_entry)
        if callee_entry in targets:
            return []
        pcs = self._answer(lambda dwarf: dwarf.tail_calls.tail_call_pcs(targets, callee_entry),
                           CHAIN_ERRORS)
        if pcs is None:
            return None
        frames: list[tuple[str, int]] = []
        for pc in pcs:
            names = self.frames_at(pc - 1)
            if not names:
                return None
            frames.append((names[0], pc))
        return frames

    def symbol_address(self, name: str) -> tuple[int, bool] | None:
        """(link-time address, external) of the ELF symbol ``name`` defined in the debug
        file's .symtab (else .dynsym), as gdb's minimal symbols: a default-versioned
        ``name@@VERSION`` answers to ``name``; a global (or weak) symbol wins over a local
        one. None when this file does not define it. gdb's ``lookup_minimal_symbol``
        searches every object file in load order and takes the first global symbol, else
        a local one: resolve :meth:`call_site_target` names that way."""
        return self._answer(lambda dwarf: dwarf.symbol(name))

    def remember(self, question: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """A caller's derived answer: computed each time (this class keeps no memo; see
        :class:`~pysframe.symbolize.dwarf_cache.CachedDwarfNames`)."""
        return compute()

    def save(self) -> None:
        """Nothing to keep: answers live as long as this object."""

    def _answer(self, question: Callable[[_Dwarf], _T],
                errors: tuple[type[BaseException], ...] = DWARF_ERRORS) -> _T | None:
        """``question`` asked of the parsed DWARF; None when there is none or it is bad."""
        dwarf = self._load()
        if dwarf is None:
            return None
        try:
            return question(dwarf)
        except errors:
            return None

    def _supplementary(self, build_id: bytes) -> str | None:
        """dwz's supplementary file with ``build_id`` (when not at the name it is given)."""
        return self._debug.by_build_id(build_id, "dwarf")

    def _load(self) -> _Dwarf | None:
        if self._dwarf is None and not self._failed:
            try:
                self._dwarf = _Dwarf(self._table, self._supplementary)
            except DWARF_ERRORS:
                self._failed = True
        return self._dwarf


class _Dwarf:
    """The parsed DWARF of one file, its parts composed: units and ranges, names, frames,
    call sites, tail calls, and the debug file's symbols by name."""

    def __init__(self, table: SectionTable, supplementary: Callable[[bytes], str | None]
                 ) -> None:
        self._path = table.path
        units = Units(table, supplementary)
        names = Names(units)
        self.frames = Frames(units, names)
        self.call_sites = CallSites(units, names)
        self.tail_calls = TailCalls(units, names, self.frames, self.call_sites, self.symbol)
        self._symbols: NamedSymbols | None = None

    def symbol(self, name: str) -> tuple[int, bool] | None:
        """(address, external) of the symbol ``name`` of the debug file."""
        if self._symbols is None:
            self._symbols = named_symbols(self._path)
        return self._symbols.lookup(name)
