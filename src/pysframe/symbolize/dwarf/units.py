"""The compilation units of one file's DWARF (and of its dwz supplementary file) by
address, and the address ranges of their DIEs as gdb takes them.

A unit is found through ``.debug_aranges``, else (no entry there) through the top DIEs
of the units it does not list; its top-level functions are indexed from the bytes
(:class:`~.scan.TopScanner`) the first time an address in it is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from elftools.common.exceptions import DWARFError

from .forms import CONSTANT_NAMES, LOCAL_REFERENCE_NAMES, REF_ADDR_NAME
from .info import DWARF_ERRORS, Info, aranges, load_info, range_list, supplementary_table
from .intervals import Intervals
from .scan import TopScanner
from .stream import SectionTable

if TYPE_CHECKING:
    from elftools.dwarf.compileunit import CompileUnit
    from elftools.dwarf.die import DIE


@dataclass(slots=True)
class Unit:
    """A compilation unit: its language and its top-level functions by address (nested
    functions indexed on first need)."""

    cu: CompileUnit
    language: int
    functions: Intervals
    nested: Intervals | None = None


class Units:
    """The DWARF of one file (``main``) and of its supplementary file, the units that
    cover an address, and the valid ranges of DIEs."""

    def __init__(self, table: SectionTable, by_build_id: Callable[[bytes], str | None]
                 ) -> None:
        self.main = load_info(table)
        self.supplementary: Info | None = None
        supplementary = supplementary_table(table, by_build_id)
        if supplementary is not None:
            try:
                self.supplementary = load_info(supplementary)
                self.main.info.supplementary_dwarfinfo = self.supplementary.info
            except DWARF_ERRORS:
                self.supplementary = None
        self._infos = {id(self.main.info): self.main}
        if self.supplementary is not None:
            self._infos[id(self.supplementary.info)] = self.supplementary
        arange_entries = aranges(self.main.aranges, self.main.little) \
            if self.main.aranges else []
        self._aranges = Intervals(arange_entries)
        self._arange_units = {entry[2] for entry in arange_entries}
        self._other_units: Intervals | None = None
        self._units: dict[int, Unit | None] = {}
        self._ranges: dict[tuple[int, int], list[tuple[int, int]] | None] = {}

    def info_of(self, die: DIE) -> Info:
        """The file (main or supplementary) ``die`` belongs to."""
        return self._infos[id(die.dwarfinfo)]

    def offsets_at(self, address: int) -> Iterator[int]:
        """The units whose ranges contain ``address``: from ``.debug_aranges``, else (no
        entry there) from the top DIEs of the units it does not list."""
        listed = list(dict.fromkeys(self._aranges.containing(address)))
        if listed:
            yield from listed
            return
        if self._other_units is None:
            self._other_units = self._scan_units()
        yield from dict.fromkeys(self._other_units.containing(address))

    def _scan_units(self) -> Intervals:
        """Top-DIE ranges of the units ``.debug_aranges`` does not list."""
        items: list[tuple[int, int, Any]] = []
        info = self.main.info
        for offset in self.main.unit_offsets():
            if offset in self._arange_units:
                continue
            try:
                cu = info.get_CU_at(offset)
                top = cu.get_top_DIE()
                if top.tag != "DW_TAG_compile_unit":
                    continue
                for low, high in self.die_ranges(top) or ():
                    items.append((low, high, offset))
            except DWARF_ERRORS:
                continue
        return Intervals(items)

    def unit(self, offset: int) -> Unit | None:
        """The unit at ``offset`` of the main file's ``.debug_info``, its top-level
        functions indexed (None, remembered, when that fails)."""
        if offset in self._units:
            return self._units[offset]
        unit: Unit | None = None
        try:
            cu = self.main.info.get_CU_at(offset)
            top = cu.get_top_DIE()
            language = top.attributes.get("DW_AT_language")
            items = TopScanner(self.main, cu).functions()
            unit = Unit(cu, language.value if language is not None else 0, Intervals(items))
        finally:
            self._units[offset] = unit
        return unit

    def die_ranges(self, die: DIE) -> list[tuple[int, int]] | None:
        """The valid address ranges of ``die``; None when it has no pc attributes (an empty
        list when it has only invalid ones, which gdb ignores)."""
        key = (id(die.dwarfinfo), die.offset)
        if key in self._ranges:
            return self._ranges[key]
        attributes = die.attributes
        result: list[tuple[int, int]] | None
        if "DW_AT_low_pc" in attributes and "DW_AT_high_pc" in attributes:
            # gdb prefers low_pc/high_pc over DW_AT_ranges when a DIE has both.
            low = attributes["DW_AT_low_pc"].value
            high_attribute = attributes["DW_AT_high_pc"]
            high = high_attribute.value
            if high_attribute.form in CONSTANT_NAMES:
                high += low
            if not isinstance(low, int) or not isinstance(high, int):
                raise DWARFError("bad pc attributes")
            result = [(low, high)] if low != 0 and low < high else []
        elif "DW_AT_ranges" in attributes:
            result = [(low, high) for low, high in self.range_list(die)
                      if low != 0 and low < high]
        else:
            result = None
        self._ranges[key] = result
        return result

    def range_list(self, die: DIE) -> list[tuple[int, int]]:
        """Every range of ``die``'s DW_AT_ranges list, invalid ones included."""
        offset = die.attributes["DW_AT_ranges"].value
        if not isinstance(offset, int):
            raise DWARFError("bad DW_AT_ranges")
        return range_list(self.info_of(die), die.cu, offset)

    def entry(self, die: DIE) -> int | None:
        """gdb's ``block::entry_pc``: the start of a contiguous function, else of the first
        of its ranges in DW_AT_ranges order (gdb 13 ignores DW_AT_entry_pc)."""
        ranges = self.die_ranges(die)
        return ranges[0][0] if ranges else None


def children(die: DIE) -> Iterator[DIE]:
    """The children of ``die``, like pyelftools' ``iter_DIE_children`` (siblings skipped
    through ``DW_AT_sibling``), but every step must move forward inside the unit: garbage
    sibling references make pyelftools loop forever."""
    if not die.has_children:
        return
    cu = die.cu
    end = cu.cu_offset + cu.size
    offset = die.offset + die.size
    while offset < end:
        child = cu.get_DIE_from_refaddr(offset)
        if child.is_null():
            return
        child.set_parent(die)
        yield child
        offset = _after(child, end)
    raise DWARFError("DIE children run past the end of their unit")


def _after(die: DIE, end: int) -> int:
    """The offset just past ``die`` and its subtree (``end``: the end of its unit)."""
    if not die.has_children:
        following = die.offset + die.size
    else:
        sibling = die.attributes.get("DW_AT_sibling")
        if sibling is not None and sibling.form in LOCAL_REFERENCE_NAMES:
            following = die.cu.cu_offset + sibling.raw_value
        elif sibling is not None and sibling.form == REF_ADDR_NAME:
            following = sibling.raw_value
        else:
            offset = die.offset + die.size
            while True:
                if offset >= end:
                    raise DWARFError("DIE children run past the end of their unit")
                child = die.cu.get_DIE_from_refaddr(offset)
                if child.is_null():
                    following = offset + child.size
                    break
                offset = _after(child, end)
    if not die.offset < following <= end:
        raise DWARFError("bad DW_AT_sibling")
    return following
