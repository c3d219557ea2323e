"""One file's DWARF as loaded for the lookups: pyelftools' ``DWARFInfo`` over lazily
inflated sections, plus what is read here with ``struct`` instead of pyelftools'
``construct`` parsing: unit offsets, ``.debug_aranges``, abbreviation tables and range
lists. Also the dwz supplementary file a ``.gnu_debugaltlink`` or ``.debug_sup`` names.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, cast

from elftools.common.exceptions import DWARFError, ELFError

from ...cfi.leb128 import read_sleb128, read_uleb128
from ...elf.headers import ElfError
from . import forms
from .stream import SectionTable, Stream, read_section_table

if TYPE_CHECKING:
    from elftools.dwarf.compileunit import CompileUnit
    from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DWARFInfo
    from elftools.dwarf.typeunit import TypeUnit

#: What a bad or truncated file makes pyelftools (or this package) raise. pyelftools also
#: raises NotImplementedError for forms it does not handle (DW_AT_sibling in an odd form,
#: references into a missing supplementary file), AssertionError from its internal
#: checks, and deep garbage nesting can exhaust the recursion limit.
DWARF_ERRORS: tuple[type[BaseException], ...] = (
    ELFError, DWARFError, KeyError, ValueError, IndexError, struct.error, OSError,
    NotImplementedError, AssertionError, RecursionError, ElfError)

# Sections a name lookup reads (compressed .zdebug_* spellings are tried too).
_WANTED = (".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str",
           ".debug_str_offsets", ".debug_addr", ".debug_ranges", ".debug_rnglists",
           ".debug_aranges")

#: An abbreviation: (tag, has children, ((attribute, form, implicit constant), ...)).
Abbreviation = tuple[int, bool, tuple[tuple[int, int, int], ...]]


def uleb(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned LEB128 at ``pos`` and the position after it."""
    return read_uleb128(data, pos, len(data))


def sleb(data: bytes, pos: int) -> tuple[int, int]:
    """The signed LEB128 at ``pos`` and the position after it."""
    return read_sleb128(data, pos, len(data))


def unit_offsets(info: bytes, little: bool) -> list[int]:
    """Offsets of every unit header in ``.debug_info`` (no DIE is parsed)."""
    order = "<" if little else ">"
    offsets: list[int] = []
    pos = 0
    while pos + 4 <= len(info):
        length = struct.unpack_from(order + "I", info, pos)[0]
        if length == 0xFFFFFFFF:
            length = struct.unpack_from(order + "Q", info, pos + 4)[0] + 12
        elif length >= 0xFFFFFFF0:
            break
        else:
            length += 4
        offsets.append(pos)
        pos += length
    return offsets


def aranges(data: bytes, little: bool) -> list[tuple[int, int, int]]:
    """``(low, high, CU offset)`` for every entry of ``.debug_aranges``."""
    order = "<" if little else ">"
    entries: list[tuple[int, int, int]] = []
    start = 0
    while start + 4 <= len(data):
        length = struct.unpack_from(order + "I", data, start)[0]
        if length == 0xFFFFFFFF:
            length = struct.unpack_from(order + "Q", data, start + 4)[0]
            head, offset_format, offset_size = start + 12, order + "Q", 8
        else:
            head, offset_format, offset_size = start + 4, order + "I", 4
        end = head + length
        if end > len(data) or length < 4 + offset_size:
            break
        cu_offset = struct.unpack_from(offset_format, data, head + 2)[0]
        address_size = data[head + 2 + offset_size]
        segment_size = data[head + 3 + offset_size]
        header_end = head + 4 + offset_size
        unit_start, start = start, end
        if address_size not in (4, 8) or segment_size != 0:
            continue
        pair = 2 * address_size
        cursor = unit_start + (header_end - unit_start + pair - 1) // pair * pair
        tuple_format = order + ("QQ" if address_size == 8 else "II")
        stop = cursor + (end - cursor) // pair * pair
        for low, size in struct.iter_unpack(tuple_format, data[cursor:stop]):
            if low == 0 and size == 0:
                break
            if size:
                entries.append((low, low + size, cu_offset))
    return entries


def abbreviations(data: bytes, offset: int) -> dict[int, Abbreviation]:
    """The abbreviation table at ``offset`` of ``.debug_abbrev``: code -> (tag, has
    children, ((attribute, form, implicit constant), ...))."""
    table: dict[int, Abbreviation] = {}
    pos = offset
    while True:
        code, pos = uleb(data, pos)
        if code == 0:
            return table
        tag, pos = uleb(data, pos)
        children = data[pos] != 0
        pos += 1
        specs: list[tuple[int, int, int]] = []
        while True:
            attribute, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            constant = 0
            if form == forms.IMPLICIT_CONST:
                constant, pos = sleb(data, pos)
            if attribute == 0 and form == 0:
                break
            specs.append((attribute, form, constant))
        table[code] = (tag, children, tuple(specs))


@dataclass(slots=True)
class Info:
    """One file's DWARF: pyelftools' DWARFInfo plus what this package adds."""

    info: DWARFInfo
    info_stream: Stream
    little: bool
    ranges: bytes | None
    rnglists: bytes | None
    aranges: bytes | None
    abbrev_stream: Stream | None
    _units: list[int] | None = None
    _abbrev_data: bytes | None = None
    _abbrev_tables: dict[int, dict[int, Abbreviation]] = field(default_factory=dict)

    def abbreviations(self, offset: int) -> dict[int, Abbreviation]:
        table = self._abbrev_tables.get(offset)
        if table is None:
            if self._abbrev_data is None:
                if self.abbrev_stream is None:
                    raise DWARFError("no .debug_abbrev")
                self._abbrev_data = self.abbrev_stream.contents()
            table = self._abbrev_tables[offset] = abbreviations(self._abbrev_data, offset)
        return table

    def unit_offsets(self) -> list[int]:
        """Offsets of all unit headers (inflates all of a compressed .debug_info)."""
        if self._units is None:
            self._units = unit_offsets(self.info_stream.contents(), self.little)
        return self._units


def load_info(table: SectionTable) -> Info:
    """The DWARF of ``table``'s file (sections are inflated only as they are read)."""
    from elftools.dwarf.dwarfinfo import DwarfConfig, DWARFInfo

    streams = {name: table.stream(name) for name in _WANTED}
    info = streams[".debug_info"]
    if info is None:
        raise DWARFError("no .debug_info")

    def descriptor(name: str) -> DebugSectionDescriptor | None:
        return _descriptor(table, name, streams[name])

    def contents(name: str) -> bytes | None:
        stream = streams[name]
        return stream.contents() if stream is not None else None

    dwarfinfo = DWARFInfo(
        config=DwarfConfig(little_endian=table.little, machine_arch="",
                           default_address_size=8 if table.wide else 4),
        debug_info_sec=descriptor(".debug_info"),
        debug_aranges_sec=None,
        debug_abbrev_sec=descriptor(".debug_abbrev"),
        debug_frame_sec=None,
        eh_frame_sec=None,
        debug_str_sec=descriptor(".debug_str"),
        debug_loc_sec=None,
        debug_ranges_sec=descriptor(".debug_ranges"),
        debug_line_sec=None,
        debug_pubtypes_sec=None,
        debug_pubnames_sec=None,
        debug_addr_sec=descriptor(".debug_addr"),
        debug_str_offsets_sec=descriptor(".debug_str_offsets"),
        debug_line_str_sec=descriptor(".debug_line_str"),
        debug_loclists_sec=None,
        debug_rnglists_sec=descriptor(".debug_rnglists"),
        debug_sup_sec=None,
        gnu_debugaltlink_sec=None,
        debug_types_sec=None)
    return Info(dwarfinfo, info, table.little, contents(".debug_ranges"),
                contents(".debug_rnglists"), contents(".debug_aranges"),
                streams[".debug_abbrev"])


def _descriptor(table: SectionTable, name: str, stream: Stream | None
                ) -> DebugSectionDescriptor | None:
    """pyelftools' description of section ``name`` served by ``stream``."""
    from elftools.dwarf.dwarfinfo import DebugSectionDescriptor

    if stream is None:
        return None
    section = table.sections.get(name) or table.sections.get(".z" + name[1:])
    offset = section.offset if section is not None else 0
    address = section.address if section is not None else 0
    return DebugSectionDescriptor(cast("IO[bytes]", stream), name, offset, stream.size,
                                  address)


def supplementary_table(table: SectionTable, by_build_id: Callable[[bytes], str | None]
                        ) -> SectionTable | None:
    """The dwz supplementary file named by ``.gnu_debugaltlink`` or ``.debug_sup``: the
    name as given (relative to the file's directory) when that file has the build id
    the link names, else the file ``by_build_id`` finds for it."""
    name: bytes | None = None
    build_id = b""
    link = table.read(".gnu_debugaltlink")
    if link:
        name, _, build_id = link.partition(b"\0")
    else:
        sup = table.read(".debug_sup")
        if sup and len(sup) > 3 and sup[2] == 0:
            end = sup.find(b"\0", 3)
            if end > 3:
                name = sup[3:end]
                length, pos = uleb(sup, end + 1)
                build_id = sup[pos:pos + length]
    if not name:
        return None
    path = os.fsdecode(name)
    named = path if os.path.isabs(path) else os.path.join(os.path.dirname(table.path), path)
    found = read_section_table(named)
    if found is not None and found.has_dwarf() and (
            not build_id or found.note_build_id() in (None, build_id)):
        return found
    by_id = by_build_id(build_id) if build_id else None
    found = read_section_table(by_id) if by_id is not None else None
    return found if found is not None and found.has_dwarf() else None


def range_list(info: Info, cu: CompileUnit | TypeUnit, offset: int) -> list[tuple[int, int]]:
    """The ranges of the range list at ``offset`` (.debug_ranges before DWARF 5,
    .debug_rnglists from 5), for a DIE of unit ``cu``."""
    top = cu.get_top_DIE()
    base_attribute = top.attributes.get("DW_AT_low_pc")
    base = base_attribute.value if base_attribute is not None else 0
    if not isinstance(base, int):
        raise DWARFError("bad DW_AT_low_pc")
    if cu["version"] < 5:
        return _ranges(info, cu["address_size"], base, offset)
    return _rnglists(info, cu, base, offset)


def _ranges(info: Info, size: int, base: int, offset: int) -> list[tuple[int, int]]:
    """A DWARF 2-4 range list of ``.debug_ranges`` (``size``: the address size)."""
    data = info.ranges
    if data is None:
        raise DWARFError("no .debug_ranges")
    order = "<" if info.little else ">"
    pair = order + ("QQ" if size == 8 else "II")
    largest = (1 << (8 * size)) - 1
    result: list[tuple[int, int]] = []
    for begin, end in struct.iter_unpack(pair, data[offset:offset + 2 * size * 4096]):
        if begin == 0 and end == 0:
            return result
        if begin == largest:
            base = end
        else:
            result.append((base + begin, base + end))
    raise DWARFError("unterminated range list")


def _rnglists(info: Info, cu: CompileUnit | TypeUnit, base: int, offset: int
              ) -> list[tuple[int, int]]:
    """A DWARF 5 range list of ``.debug_rnglists``."""
    data = info.rnglists
    if data is None:
        raise DWARFError("no .debug_rnglists")
    size = cu["address_size"]
    address = ("<" if info.little else ">") + ("Q" if size == 8 else "I")
    result: list[tuple[int, int]] = []
    pos = offset
    while True:
        kind = data[pos]
        pos += 1
        if kind == 0:                                   # DW_RLE_end_of_list
            return result
        if kind == 1:                                   # DW_RLE_base_addressx
            index, pos = uleb(data, pos)
            base = info.info.get_addr(cu, index)
        elif kind in (2, 3):                            # startx_endx, startx_length
            first, pos = uleb(data, pos)
            second, pos = uleb(data, pos)
            start = info.info.get_addr(cu, first)
            stop = info.info.get_addr(cu, second) if kind == 2 else start + second
            result.append((start, stop))
        elif kind == 4:                                 # DW_RLE_offset_pair
            first, pos = uleb(data, pos)
            second, pos = uleb(data, pos)
            result.append((base + first, base + second))
        elif kind == 5:                                 # DW_RLE_base_address
            base = struct.unpack_from(address, data, pos)[0]
            pos += size
        elif kind == 6:                                 # DW_RLE_start_end
            start = struct.unpack_from(address, data, pos)[0]
            stop = struct.unpack_from(address, data, pos + size)[0]
            pos += 2 * size
            result.append((start, stop))
        elif kind == 7:                                 # DW_RLE_start_length
            start = struct.unpack_from(address, data, pos)[0]
            length, pos = uleb(data, pos + size)
            result.append((start, start + length))
        else:
            raise DWARFError(f"unknown range list entry kind {kind}")
