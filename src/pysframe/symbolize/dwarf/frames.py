"""The frames gdb shows for a pc: the inlined subroutines that contain it, innermost
first, down to the innermost non-inlined function.

Every ``DW_TAG_inlined_subroutine`` that has a name and valid ranges containing the
address is one frame, up to the innermost non-inlined ``DW_TAG_subprogram``. Functions
without a name or valid bounds (``low_pc`` 0, ``high_pc <= low_pc``) are ignored with
their children, as gdb ignores them; lexical, try and catch blocks are transparent. gdb
hides the inline frames whose block starts at the pc of frame 0 only when it stops at a
breakpoint or after a step, not when it attaches, so they are kept here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .intervals import Intervals
from .names import Names
from .units import Unit, Units, children

if TYPE_CHECKING:
    from elftools.dwarf.die import DIE

_FUNCTION_TAGS = frozenset(("DW_TAG_subprogram", "DW_TAG_inlined_subroutine"))
BLOCK_TAGS = frozenset(("DW_TAG_lexical_block", "DW_TAG_try_block", "DW_TAG_catch_block"))


class Frames:
    """The function DIEs and names at an address."""

    def __init__(self, units: Units, names: Names) -> None:
        self._units = units
        self._names = names

    def at(self, address: int) -> tuple[Unit, list[DIE], list[str]] | None:
        """The unit, the function DIEs and their names at ``address``, innermost first down
        to the innermost non-inlined subprogram (gdb's ``block_linkage_function``)."""
        units = self._units
        for unit_offset in units.offsets_at(address):
            unit = units.unit(unit_offset)
            if unit is None:
                continue
            for function_offset in unit.functions.containing(address):
                function = unit.cu.get_DIE_from_refaddr(function_offset)
                found = self._frames(unit, function, address)
                if found is not None:
                    return unit, *found
            # Nested functions (GNU C, Pascal, Fortran) may lie outside their parent's
            # ranges: index them the first time an address misses the top-level ones.
            if unit.nested is None:
                unit.nested = self._nested_functions(unit)
            for function in unit.nested.containing(address):
                found = self._frames(unit, function, address)
                if found is not None:
                    return unit, *found
        return None

    def names_at(self, address: int) -> list[str] | None:
        """The names of the frames at ``address``, innermost first."""
        found = self.at(address)
        return found[2] if found is not None else None

    def function_entry(self, address: int) -> int | None:
        """The entry of the non-inlined function at ``address``."""
        found = self.at(address)
        return self._units.entry(found[1][-1]) if found is not None else None

    def _frames(self, unit: Unit, function: DIE, address: int
                ) -> tuple[list[DIE], list[str]] | None:
        """The frames at ``address`` inside ``function`` (DIEs and names), innermost first."""
        path = [function, *self._descend(function, address)]
        dies: list[DIE] = []
        names: list[str] = []
        for die in reversed(path):
            name = self._names.print_name(die, unit.language)
            if name is None:
                return None
            dies.append(die)
            names.append(name)
            if die.tag == "DW_TAG_subprogram":
                return dies, names
        return None

    def _nested_functions(self, unit: Unit) -> Intervals:
        items: list[tuple[int, int, Any]] = []
        seen = set(unit.functions.payloads())
        pending = [unit.cu.get_DIE_from_refaddr(offset) for offset in seen]
        while pending:
            parent = pending.pop()
            for child in children(parent):
                tag = child.tag
                if tag == "DW_TAG_subprogram" and child.offset not in seen:
                    seen.add(child.offset)
                    for low, high in self._units.die_ranges(child) or ():
                        items.append((low, high, child))
                    pending.append(child)
                elif tag in BLOCK_TAGS or tag == "DW_TAG_inlined_subroutine":
                    pending.append(child)
        return Intervals(items)

    def _descend(self, die: DIE, address: int) -> list[DIE]:
        """The named function DIEs below ``die`` that contain ``address``, outermost first."""
        for child in children(die):
            tag = child.tag
            if tag in _FUNCTION_TAGS:
                ranges = self._units.die_ranges(child)
                if not ranges or not any(low <= address < high for low, high in ranges):
                    continue
                if self._names.has_name(child):
                    return [child, *self._descend(child, address)]
                # gdb drops an unnamed function with its children: the enclosing block
                # keeps the address.
            elif tag in BLOCK_TAGS:
                ranges = self._units.die_ranges(child)
                if ranges is None:
                    inner = self._descend(child, address)
                    if inner:
                        return inner
                elif any(low <= address < high for low, high in ranges):
                    return self._descend(child, address)
        return []
