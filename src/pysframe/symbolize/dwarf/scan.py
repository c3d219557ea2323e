"""Scanners that read a unit's DIEs straight from the bytes of ``.debug_info`` with the
unit's abbreviations, for the two questions asked of whole units: which top-level
functions (namespaces and modules entered) cover which addresses, and where the call
sites are. The units of a big library have hundreds of top-level DIEs (types,
declarations) that pyelftools would turn into objects one by one; these only decode the
attributes they need and skip the rest by sizes or through ``DW_AT_sibling``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from elftools.common.exceptions import DWARFError

from . import forms
from .forms import (
    BLOCK,
    BLOCK1,
    BLOCK2,
    BLOCK4,
    EXPRLOC,
    IMPLICIT_CONST,
    INDIRECT,
    LEB128,
    SDATA,
    STRING,
    ULEB128,
)
from .info import Info, range_list, sleb, uleb

if TYPE_CHECKING:
    from elftools.dwarf.compileunit import CompileUnit

# Tags and attributes the scanners look at.
TAG_SUBPROGRAM = 0x2E
TAG_SUBROUTINE_TYPE = 0x15
_TAG_NAMESPACE = 0x39
_TAG_MODULE = 0x1E
_AT_SIBLING = 0x01
_AT_LOW_PC = 0x11
_AT_HIGH_PC = 0x12
_AT_RANGES = 0x55
_AT_CALL_RETURN_PC = 0x7D
_TAIL_CALL_FLAGS = (0x82, 0x2115)    # DW_AT_call_tail_call, DW_AT_GNU_tail_call

# Attributes the top-level scanner decodes: DW_AT_sibling, low_pc, high_pc, ranges.
_TOP_ATTRIBUTES = frozenset((_AT_SIBLING, _AT_LOW_PC, _AT_HIGH_PC, _AT_RANGES))
# DW_AT_sibling, low_pc, call_return_pc, call_tail_call, GNU_tail_call.
_CALL_SITE_ATTRIBUTES = frozenset((_AT_SIBLING, _AT_LOW_PC, _AT_CALL_RETURN_PC,
                                   *_TAIL_CALL_FLAGS))
_CALL_SITE_TAG_CODES = frozenset((0x48, 0x4109))    # DW_TAG_call_site, DW_TAG_GNU_call_site
#: The DIEs whose children can hold call sites, which the scanner enters: subprogram,
#: inlined subroutine, lexical, try and catch blocks, namespace, module. Any other DIE
#: with children (types above all) is skipped, through DW_AT_sibling when it has one.
CODE_SCOPES = frozenset((TAG_SUBPROGRAM, 0x1D, 0x0B, 0x32, 0x25, _TAG_NAMESPACE,
                         _TAG_MODULE))


class TopScanner:
    """The top-level functions of a unit (namespaces and modules included) with their
    ranges."""

    def __init__(self, info: Info, cu: CompileUnit) -> None:
        self.info = info
        self.cu = cu
        self.offset_size = 8 if cu.structs.dwarf_format == 64 else 4
        self.address_size = cu["address_size"]
        self.version = cu["version"]
        self.abbreviations = info.abbreviations(cu["debug_abbrev_offset"])
        self.data = info.info_stream.piece(cu.cu_offset, cu.size)
        self.order = "<" if info.little else ">"
        self.items: list[tuple[int, int, Any]] = []
        self.codes = _TOP_ATTRIBUTES

    def functions(self) -> list[tuple[int, int, Any]]:
        """``(low, high, DIE offset)`` for every range of every top-level function."""
        start = self.cu.cu_die_offset - self.cu.cu_offset
        code, pos = uleb(self.data, start)
        _tag, children, specs = self.abbreviations[code]
        pos = self._attributes(pos, specs, None)
        if children:
            self._children(pos, True)
        return self.items

    def _children(self, pos: int, collect: bool) -> int:
        """Walk the children starting at ``pos``; the offset after their terminator."""
        data = self.data
        abbreviations = self.abbreviations
        while True:
            die_start = pos
            code, pos = uleb(data, pos)
            if code == 0:
                return pos
            tag, children, specs = abbreviations[code]
            wanted: dict[int, tuple[int, int]] | None = {} if collect else None
            pos = self._attributes(pos, specs, wanted)
            if wanted is not None and tag == TAG_SUBPROGRAM:
                for low, high in self._ranges(wanted):
                    self.items.append((low, high, self.cu.cu_offset + die_start))
            if not children:
                continue
            descend = collect and tag in (_TAG_NAMESPACE, _TAG_MODULE)
            following = (self._sibling(die_start, wanted.get(_AT_SIBLING))
                         if wanted is not None and not descend else None)
            pos = following if following is not None else self._children(pos, descend)

    def _ranges(self, wanted: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
        low = wanted.get(_AT_LOW_PC)
        high = wanted.get(_AT_HIGH_PC)
        if low is not None and high is not None:
            low_value = self._address(*low)
            high_value = high[1] if high[0] not in forms.CONSTANT else low_value + high[1]
            return [(low_value, high_value)] if low_value != 0 and low_value < high_value \
                else []
        ranges = wanted.get(_AT_RANGES)
        if ranges is None:
            return []
        form, value = ranges
        if form == forms.RNGLISTX:
            top = self.cu.get_top_DIE()
            base = top.attributes.get("DW_AT_rnglists_base")
            base_value = base.value if base is not None else 12
            data = self.info.rnglists or b""
            size = self.offset_size
            entry = struct.unpack_from(self.order + ("Q" if size == 8 else "I"), data,
                                       base_value + value * size)[0]
            value = base_value + entry
        return [(start, stop) for start, stop in range_list(self.info, self.cu, value)
                if start != 0 and start < stop]

    def _address(self, form: int, value: int) -> int:
        if form in forms.ADDRESS_INDEX:
            address: int = self.info.info.get_addr(self.cu, value)
            return address
        return value

    def _form_size(self, form: int) -> int | None:
        """The size of an attribute of ``form`` when it is fixed in this unit, else None."""
        size = forms.FIXED_SIZES.get(form)
        if size is not None:
            return size
        if form == forms.ADDR:
            return int(self.address_size)
        if form in forms.OFFSET_SIZED or (form == forms.REF_ADDR and self.version > 2):
            return int(self.offset_size)
        if form == forms.REF_ADDR:                              # DWARF 2: address-sized
            return int(self.address_size)
        return None

    def _sibling(self, die_start: int, sibling: tuple[int, int] | None) -> int | None:
        """Where a DIE's DW_AT_sibling (a unit-local reference) points: strictly after the
        DIE and inside the data, else DWARFError; None without a usable one."""
        if sibling is None or sibling[0] not in forms.LOCAL_REFERENCE:
            return None
        if not die_start < sibling[1] <= len(self.data):
            raise DWARFError("bad DW_AT_sibling")
        return sibling[1]

    def _attributes(self, pos: int, specs: tuple[tuple[int, int, int], ...],
                    wanted: dict[int, tuple[int, int]] | None) -> int:
        """Skip (or, for the attributes this needs, decode) one DIE's attributes."""
        data = self.data
        byteorder: Literal["little", "big"] = "little" if self.order == "<" else "big"
        for attribute, form, constant in specs:
            if form == INDIRECT:
                form, pos = uleb(data, pos)
            size = self._form_size(form)
            if wanted is not None and attribute in self.codes:
                if form == IMPLICIT_CONST:
                    value = constant
                elif size is not None:
                    value = int.from_bytes(data[pos:pos + size], byteorder)
                elif form in ULEB128:
                    value, _ = uleb(data, pos)
                elif form == SDATA:
                    value, _ = sleb(data, pos)
                else:
                    value = 0
                wanted[attribute] = (form, value)
            if size is not None:
                pos += size
            elif form in LEB128:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif form == STRING:
                pos = data.index(b"\0", pos) + 1
            elif form in (BLOCK, EXPRLOC):
                length, pos = uleb(data, pos)
                pos += length
            elif form == BLOCK1:
                pos += 1 + data[pos]
            elif form == BLOCK2:
                pos += 2 + int.from_bytes(data[pos:pos + 2], byteorder)
            elif form == BLOCK4:
                pos += 4 + int.from_bytes(data[pos:pos + 4], byteorder)
            else:
                raise DWARFError(f"unknown attribute form {form:#x}")
            if pos > len(data):
                raise DWARFError("DIE runs past the end of its unit")
        return pos


@dataclass(slots=True, frozen=True)
class RawCallSite:
    """A DW_TAG_call_site as the scanner read it."""

    offset: int                         # of the DIE in .debug_info
    pc: int                             # return pc (DW_AT_call_return_pc or DW_AT_low_pc)
    tail: bool                          # DW_AT_call_tail_call / DW_AT_GNU_tail_call
    scopes: tuple[tuple[int, int], ...]  # enclosing DIEs (tag, offset), outermost first

    def owner(self) -> int | None:
        """The DIE whose tail-call list gdb puts this site in: the nearest enclosing
        DW_TAG_subprogram (or DW_TAG_subroutine_type), through inlined subroutines."""
        for tag, offset in reversed(self.scopes):
            if tag in (TAG_SUBPROGRAM, TAG_SUBROUTINE_TYPE):
                return offset
        return None


class CallSiteScanner(TopScanner):
    """Every DW_TAG_call_site / DW_TAG_GNU_call_site of a unit with its return pc, its
    tail-call flag and the DIEs that enclose it, read like :class:`TopScanner`: subtrees
    that cannot hold code are skipped through DW_AT_sibling, and a DIE whose attributes
    all have fixed sizes in one step."""

    def __init__(self, info: Info, cu: CompileUnit) -> None:
        super().__init__(info, cu)
        self.codes = _CALL_SITE_ATTRIBUTES
        self._fixed: dict[int, int | None] = {}

    def call_sites(self) -> list[RawCallSite]:
        """The unit's call sites in DIE order."""
        data = self.data
        abbreviations = self.abbreviations
        base = self.cu.cu_offset
        code, pos = uleb(data, self.cu.cu_die_offset - base)
        _tag, children, specs = abbreviations[code]
        pos = self._attributes(pos, specs, None)
        sites: list[RawCallSite] = []
        if not children:
            return sites
        scopes: list[tuple[int, int]] = []
        fixed = self._fixed
        while True:
            die_start = pos
            code, pos = uleb(data, pos)
            if code == 0:
                if not scopes:
                    return sites
                scopes.pop()
                continue
            tag, has_children, specs = abbreviations[code]
            if tag in _CALL_SITE_TAG_CODES:
                wanted: dict[int, tuple[int, int]] = {}
                pos = self._attributes(pos, specs, wanted)
                site = self._site(base + die_start, wanted, scopes)
                if site is not None:
                    sites.append(site)
            elif has_children and tag not in CODE_SCOPES:
                wanted = {}
                pos = self._attributes(pos, specs, wanted)
                following = self._sibling(die_start, wanted.get(_AT_SIBLING))
                if following is not None:
                    pos = following
                    continue
            else:
                size = fixed.get(code, -1)
                if size == -1:
                    size = fixed[code] = self._fixed_size(specs)
                if size is None:
                    pos = self._attributes(pos, specs, None)
                else:
                    pos += size
            if has_children:
                scopes.append((tag, base + die_start))

    def _site(self, offset: int, wanted: dict[int, tuple[int, int]],
              scopes: list[tuple[int, int]]) -> RawCallSite | None:
        # gdb: DW_AT_call_return_pc, else (GNU call sites) DW_AT_low_pc; none: ignored.
        pc = wanted.get(_AT_CALL_RETURN_PC) or wanted.get(_AT_LOW_PC)
        if pc is None:
            return None
        tail = False
        for code in _TAIL_CALL_FLAGS:
            flag = wanted.get(code)
            if flag is not None and (flag[0] == forms.FLAG_PRESENT or flag[1] != 0):
                tail = True
        return RawCallSite(offset, self._address(*pc), tail, tuple(scopes))

    def _fixed_size(self, specs: tuple[tuple[int, int, int], ...]) -> int | None:
        """The size of a DIE's attributes when no form has a variable size."""
        total = 0
        for _attribute, form, _constant in specs:
            size = self._form_size(form)
            if size is None:
                return None
            total += size
        return total
