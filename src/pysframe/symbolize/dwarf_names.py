"""Function names and inline frames for a code address, from DWARF, named as gdb names them.

Why by hand on top of pyelftools: pyelftools parses DIEs, attributes, forms, strings and
supplementary (dwz) files, but it has no query "which inlined subroutines and which
function contain this address", gdb's naming rules are not DWARF's ``DW_AT_name``, and
its convenience paths are slow for this use (``get_dwarf_info`` decompresses every debug
section and searches relocations; reference lookups parse unit headers one by one;
``ARanges`` and every DIE go through ``construct``). So this module reads the section
headers itself, inflates only the sections a lookup needs and ``.debug_info`` only as far
as it is read, builds pyelftools' ``DWARFInfo`` from them, reads ``.debug_aranges``,
range lists and the top level of a unit with ``struct`` (pyelftools parses only the
DIEs of the function that contains the address, and siblings are skipped through
``DW_AT_sibling``).

The names follow gdb 13, because the point is to print what ``bt`` prints:

* gdb makes ``DW_AT_linkage_name`` (else ``DW_AT_MIPS_linkage_name``) a function symbol's
  linkage name when there is one, and for C (and every language without a demangled
  form) the name it prints is that linkage name: an asm-renamed C declaration such as
  glibc's ``__libc_write`` prints as ``__GI___libc_write``. Without one it is
  ``DW_AT_name``.
* Attributes are looked up the way gdb's ``dwarf2_attr`` does: on the DIE, else through
  its ``DW_AT_specification`` / ``DW_AT_abstract_origin`` (across units and into the
  supplementary file).
* C++: gdb prints the linkage name demangled (with the return type of templates dropped)
  and then without its parameters, or the whole name when its C++ name parser rejects it.
  This uses the C++ runtime's demangler and the same removals (see
  :mod:`pysframe.symbolize.cplus`). Without a linkage name (and for Rust and Fortran) gdb
  qualifies ``DW_AT_name`` with the enclosing namespaces, classes and modules.
* Every ``DW_TAG_inlined_subroutine`` that has a name and valid ranges containing the
  address is one frame, innermost first, up to the innermost non-inlined
  ``DW_TAG_subprogram``. Functions without a name or valid bounds (``low_pc`` 0,
  ``high_pc <= low_pc``) are ignored with their children, as gdb ignores them; lexical,
  try and catch blocks are transparent. gdb hides the inline frames whose block starts at
  the pc of frame 0 only when it stops at a breakpoint or after a step, not when it
  attaches, so they are kept here.

Tail calls: gdb also prints frames for functions that tail-called (jumped to) the next
frame's function, which no unwinder can see. It builds them from the DWARF call sites
(gdb 13: ``read_call_site_scope`` in dwarf2/read.c, ``call_site_find_chain`` in
dwarf2/loc.c, ``dwarf2_tailcall_sniffer_first`` and ``pretend_pc`` in
dwarf2/frame-tailcall.c): the caller's call site at the return address names a callee;
when that is not the function of the frame below, gdb searches the tail-call sites of the
functions from there for paths to it, and shows the frames every path agrees on.
:meth:`DwarfNames.call_site_target`, :meth:`DwarfNames.function_entry` and
:meth:`DwarfNames.tail_call_chain` reproduce that (the rules are in their docstrings); the
call sites of a unit are indexed, straight from the bytes, only when an address in it is
asked for.

Nothing is read until the first :meth:`DwarfNames.frames_at` (or call-site lookup) except
the ELF section headers that decide where the DWARF is. Bad or missing DWARF gives
``None``, never an exception.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, ClassVar, cast

from elftools.common.exceptions import DWARFError, ELFError

from ..cfi.leb128 import read_sleb128, read_uleb128
from ..elf.debuginfo import build_id_path
from ..elf.headers import (
    SHF_COMPRESSED,
    SHT_NOBITS,
    ElfError,
    SectionHeader,
    find_build_id,
    read_file_header,
    read_section_headers,
)
from .cplus import cplus_function_name, demangle
from .symbols import NamedSymbols, named_symbols

if TYPE_CHECKING:
    from elftools.dwarf.compileunit import CompileUnit
    from elftools.dwarf.die import DIE
    from elftools.dwarf.dwarfinfo import DWARFInfo
    from elftools.dwarf.typeunit import TypeUnit

# What a bad or truncated file makes pyelftools (or this module) raise. pyelftools also
# raises NotImplementedError for forms it does not handle (DW_AT_sibling in an odd form,
# references into a missing supplementary file), AssertionError from its internal
# checks, and deep garbage nesting can exhaust the recursion limit.
_DWARF_ERRORS: tuple[type[BaseException], ...] = (
    ELFError, DWARFError, KeyError, ValueError, IndexError, struct.error, OSError,
    NotImplementedError, AssertionError, RecursionError, ElfError)

ELFCOMPRESS_ZLIB = 1
ELFCOMPRESS_ZSTD = 2
_MAX_SECTION = 1 << 31          # refuse to decompress (or read) more than 2 GiB
_MAX_SECTIONS = 1 << 20         # a section count beyond this is taken for garbage
_MAX_HOPS = 16                  # DW_AT_specification / abstract_origin chain length

# Sections a name lookup reads (compressed .zdebug_* spellings are tried too).
_WANTED = (".debug_info", ".debug_abbrev", ".debug_str", ".debug_line_str",
           ".debug_str_offsets", ".debug_addr", ".debug_ranges", ".debug_rnglists",
           ".debug_aranges")

_FUNCTION_TAGS = frozenset(("DW_TAG_subprogram", "DW_TAG_inlined_subroutine"))
_BLOCK_TAGS = frozenset(("DW_TAG_lexical_block", "DW_TAG_try_block", "DW_TAG_catch_block"))
_LOCAL_REFS = frozenset(("DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8",
                         "DW_FORM_ref_udata", "DW_FORM_ref"))
_SUPPLEMENTARY_REFS = frozenset(("DW_FORM_GNU_ref_alt", "DW_FORM_ref_sup4",
                                 "DW_FORM_ref_sup8"))
_CONSTANT_FORMS = frozenset(("DW_FORM_data1", "DW_FORM_data2", "DW_FORM_data4",
                             "DW_FORM_data8", "DW_FORM_udata", "DW_FORM_sdata",
                             "DW_FORM_implicit_const"))
# DW_AT_language values gdb treats as C++ (C++ variants, Objective C++), Fortran and Rust:
# their frames print scope-qualified names.
_CPLUS_LANGUAGES = frozenset((0x04, 0x11, 0x19, 0x1A, 0x21, 0x2A, 0x2B))
_QUALIFIED_LANGUAGES = _CPLUS_LANGUAGES | {0x07, 0x08, 0x0E, 0x22, 0x23, 0x2D, 0x1C}
_QUALIFYING_PARENTS = frozenset(("DW_TAG_namespace", "DW_TAG_module", "DW_TAG_class_type",
                                 "DW_TAG_structure_type", "DW_TAG_union_type",
                                 "DW_TAG_interface_type"))


# ----------------------------------------------------------------------------- ELF sections


@dataclass(slots=True)
class _SectionTable:
    """The section headers of one ELF file (nothing else is read)."""

    path: str
    little: bool
    wide: bool
    sections: dict[str, SectionHeader]

    def has_dwarf(self) -> bool:
        for name in (".debug_info", ".zdebug_info"):
            section = self.sections.get(name)
            if section is not None and section.type != SHT_NOBITS and section.size > 0:
                return True
        return False

    def read(self, name: str) -> bytes | None:
        """The contents of section ``name`` (decompressed), or None when absent."""
        stream = self.stream(name)
        return stream.contents() if stream is not None else None

    def stream(self, name: str) -> _Stream | None:
        """Section ``name`` as a stream (a compressed one is inflated as far as it is
        read), or None when absent."""
        section = self.sections.get(name)
        compressed_name = False
        if section is None and name.startswith(".debug_"):
            section = self.sections.get(".zdebug_" + name[len(".debug_"):])
            compressed_name = True
        if section is None or section.type == SHT_NOBITS:
            return None
        if section.size > _MAX_SECTION:
            raise ValueError(f"{name}: section too large")
        with open(self.path, "rb") as handle:
            handle.seek(section.offset)
            data = handle.read(section.size)
        if len(data) != section.size:
            raise ValueError(f"{name}: truncated section")
        if section.flags & SHF_COMPRESSED:
            return self._compressed(name, data)
        if compressed_name and data[:4] == b"ZLIB":
            if len(data) < 12:
                raise ValueError(f"{name}: truncated compression header")
            return _Stream(name, data, 12, int.from_bytes(data[4:12], "big"))
        return _Stream(name, data)

    def _compressed(self, name: str, data: bytes) -> _Stream:
        """An SHF_COMPRESSED section: its Elf32_Chdr / Elf64_Chdr, then the data."""
        order = "<" if self.little else ">"
        if self.wide:
            kind, _, size, _ = struct.unpack_from(order + "IIQQ", data, 0)
            start = 24
        else:
            kind, size, _ = struct.unpack_from(order + "III", data, 0)
            start = 12
        if kind == ELFCOMPRESS_ZLIB:
            return _Stream(name, data, start, size)
        if kind == ELFCOMPRESS_ZSTD:
            return _Stream(name, _unzstd(name, data[start:], size))
        raise ValueError(f"{name}: unknown compression type {kind}")

    def note_build_id(self) -> bytes | None:
        """The GNU build id note of ``.note.gnu.build-id``, if any."""
        data = self.read(".note.gnu.build-id")
        if not data:
            return None
        return find_build_id(data, [(0, len(data))], not self.little) or None

    def debuglink(self) -> str | None:
        data = self.read(".gnu_debuglink")
        if not data:
            return None
        name = data.split(b"\0", 1)[0]
        return os.fsdecode(name) if name and b"/" not in name else None


def _read_section_table(path: str) -> _SectionTable | None:
    """The section headers of ``path``, or None when it is not a readable ELF file with
    section headers."""
    try:
        with open(path, "rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            header = read_file_header(data, path)
            if not 0 < header.shnum <= _MAX_SECTIONS:
                return None
            rows = read_section_headers(data, header)
    except (OSError, ValueError, struct.error, ElfError):
        return None
    if rows[header.shstrndx].size > _MAX_SECTION:
        return None
    sections: dict[str, SectionHeader] = {}
    for row in rows:
        sections.setdefault(row.name, row)
    return _SectionTable(path, not header.big_endian, header.layout.wide, sections)


def _unzstd(name: str, data: bytes, size: int) -> bytes:
    if size > _MAX_SECTION:
        raise ValueError(f"{name}: section too large")
    import zstandard

    try:
        out: bytes = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    except zstandard.ZstdError as error:
        raise ValueError(f"{name}: {error}") from None
    if len(out) != size:
        raise ValueError(f"{name}: bad decompressed size")
    return out


class _Stream:
    """A section's contents as the binary stream pyelftools reads (``read``, ``seek``,
    ``tell``, served by a ``BytesIO``). A zlib-compressed section is inflated only as far
    as it is read: the CU of an address near the start of a 6 MB ``.debug_info`` does not
    pay for the rest."""

    _CHUNK = 1 << 16

    def __init__(self, name: str, data: bytes, start: int | None = None,
                 size: int | None = None) -> None:
        self.name = name
        self._inflater: Any = None
        self._input = memoryview(b"")
        if start is None or size is None:
            self._io = io.BytesIO(data)
            self.size = self._available = len(data)
        else:
            if size > _MAX_SECTION:
                raise ValueError(f"{name}: section too large")
            self._io = io.BytesIO()
            self.size = size
            self._available = 0
            self._input = memoryview(data)[start:]
            self._inflater = zlib.decompressobj()
        self.seek: Callable[..., int] = self._io.seek
        self.tell: Callable[[], int] = self._io.tell
        self.read: Callable[..., bytes] = (
            self._io.read if self._available == self.size else self._read)

    def _read(self, count: int | None = -1) -> bytes:
        """``read`` until the section is inflated (then BytesIO's own)."""
        position = self._io.tell()
        end = self.size if count is None or count < 0 else position + count
        if end > self._available:
            self._fill(end)
        return self._io.read(count)

    def _fill(self, end: int) -> None:
        end = min(end, self.size)
        position = self._io.tell()
        self._io.seek(self._available)
        try:
            while self._available < end and self._inflater is not None:
                inflater = self._inflater
                if inflater.unconsumed_tail:
                    chunk = inflater.unconsumed_tail
                elif self._input:
                    chunk, self._input = self._input[:self._CHUNK], self._input[self._CHUNK:]
                else:
                    break
                try:
                    out = inflater.decompress(chunk, max(end - self._available,
                                                         4 * self._CHUNK))
                except zlib.error as error:
                    raise ValueError(f"{self.name}: {error}") from None
                self._available += len(out)
                if self._available > self.size:
                    raise ValueError(f"{self.name}: bad decompressed size")
                self._io.write(out)
                if inflater.eof:
                    self._inflater = None
        finally:
            self._io.seek(position)
        if self._available < end:
            raise ValueError(f"{self.name}: truncated compressed section")
        if self._available == self.size:
            self.read = self._io.read

    def contents(self) -> bytes:
        self._fill(self.size)
        return self._io.getvalue()

    def piece(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (the stream position is kept)."""
        if start + length > self._available:
            self._fill(start + length)
        position = self._io.tell()
        self._io.seek(start)
        data = self._io.read(length)
        self._io.seek(position)
        if len(data) != length:
            raise ValueError(f"{self.name}: read past the end")
        return data


# ----------------------------------------------------------------------------- intervals


class _Intervals:
    """Half-open ``[low, high)`` intervals with a payload; the first containing one wins."""

    __slots__ = ("_highs", "_lows", "_max_high", "_payloads")

    def __init__(self, items: list[tuple[int, int, Any]]) -> None:
        items = sorted((item for item in items if item[0] < item[1]), key=lambda i: i[0])
        self._lows = [item[0] for item in items]
        self._highs = [item[1] for item in items]
        self._payloads = [item[2] for item in items]
        self._max_high: list[int] = []
        top = 0
        for high in self._highs:
            top = max(top, high)
            self._max_high.append(top)

    def payloads(self) -> list[Any]:
        return list(self._payloads)

    def containing(self, address: int) -> Iterator[Any]:
        index = bisect_right(self._lows, address) - 1
        while index >= 0 and self._max_high[index] > address:
            if self._highs[index] > address:
                yield self._payloads[index]
            index -= 1


# ----------------------------------------------------------------------------- DWARF


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    return read_uleb128(data, pos, len(data))


def _unit_offsets(info: bytes, little: bool) -> list[int]:
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


def _aranges(data: bytes, little: bool) -> list[tuple[int, int, int]]:
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


def _children(die: DIE) -> Iterator[DIE]:
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
        if sibling is not None and sibling.form in _LOCAL_REFS:
            following = die.cu.cu_offset + sibling.raw_value
        elif sibling is not None and sibling.form == "DW_FORM_ref_addr":
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


@dataclass(slots=True)
class _Info:
    """One file's DWARF: pyelftools' DWARFInfo plus what this module adds."""

    info: DWARFInfo
    info_stream: _Stream
    little: bool
    ranges: bytes | None
    rnglists: bytes | None
    aranges: bytes | None
    abbrev_stream: _Stream | None
    _units: list[int] | None = None
    _abbrev_data: bytes | None = None
    _abbrev_tables: dict[int, Any] = field(default_factory=dict)

    def abbreviations(self, offset: int) -> dict[int, tuple[int, bool,
                                                            tuple[tuple[int, int, int], ...]]]:
        table = self._abbrev_tables.get(offset)
        if table is None:
            if self._abbrev_data is None:
                if self.abbrev_stream is None:
                    raise DWARFError("no .debug_abbrev")
                self._abbrev_data = self.abbrev_stream.contents()
            table = self._abbrev_tables[offset] = _abbreviations(self._abbrev_data, offset)
        return table

    def unit_offsets(self) -> list[int]:
        """Offsets of all unit headers (inflates all of a compressed .debug_info)."""
        if self._units is None:
            self._units = _unit_offsets(self.info_stream.contents(), self.little)
        return self._units


def _load_info(table: _SectionTable) -> _Info:
    from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DwarfConfig, DWARFInfo

    streams = {name: table.stream(name) for name in _WANTED}
    info = streams[".debug_info"]
    if info is None:
        raise DWARFError("no .debug_info")

    def descriptor(name: str) -> DebugSectionDescriptor | None:
        stream = streams[name]
        if stream is None:
            return None
        section = table.sections.get(name) or table.sections.get(".z" + name[1:])
        offset = section.offset if section is not None else 0
        address = section.address if section is not None else 0
        return DebugSectionDescriptor(cast("IO[bytes]", stream), name, offset, stream.size,
                                      address)

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
    return _Info(dwarfinfo, info, table.little, contents(".debug_ranges"),
                 contents(".debug_rnglists"), contents(".debug_aranges"),
                 streams[".debug_abbrev"])


def _supplementary_table(table: _SectionTable, debug_root: str) -> _SectionTable | None:
    """The dwz supplementary file named by ``.gnu_debugaltlink`` or ``.debug_sup``."""
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
                length, pos = _uleb(sup, end + 1)
                build_id = sup[pos:pos + length]
    if not name:
        return None
    path = os.fsdecode(name)
    candidates = [path if os.path.isabs(path)
                  else os.path.join(os.path.dirname(table.path), path)]
    if build_id:
        candidates.append(build_id_path(build_id, debug_root))
    for candidate in candidates:
        found = _read_section_table(candidate)
        if found is not None and found.has_dwarf():
            return found
    return None


class _TopScanner:
    """The top-level functions of a unit (namespaces and modules included) with their
    ranges, read straight from the bytes with the unit's abbreviations: the units of a big
    library have hundreds of top-level DIEs (types, declarations) that pyelftools would
    turn into objects one by one; this only decodes what it needs and skips the rest
    through DW_AT_sibling or by sizes."""

    def __init__(self, dwarf: _Dwarf, info: _Info, cu: CompileUnit) -> None:
        self.dwarf = dwarf
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
        start = self.cu.cu_die_offset - self.cu.cu_offset
        code, pos = _uleb(self.data, start)
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
            code, pos = _uleb(data, pos)
            if code == 0:
                return pos
            tag, children, specs = abbreviations[code]
            wanted: dict[int, tuple[int, int]] | None = {} if collect else None
            pos = self._attributes(pos, specs, wanted)
            if wanted is not None and tag == 0x2E:              # DW_TAG_subprogram
                for low, high in self._ranges(wanted):
                    self.items.append((low, high, self.cu.cu_offset + die_start))
            if not children:
                continue
            descend = collect and tag in (0x39, 0x1E)          # namespace, module
            following = (self._sibling(die_start, wanted.get(0x01))
                         if wanted is not None and not descend else None)
            pos = following if following is not None else self._children(pos, descend)

    def _ranges(self, wanted: dict[int, tuple[int, int]]) -> list[tuple[int, int]]:
        low = wanted.get(0x11)
        high = wanted.get(0x12)
        if low is not None and high is not None:
            low_value = self._address(*low)
            high_value = high[1] if high[0] not in _CONSTANT_FORM_CODES \
                else low_value + high[1]
            return [(low_value, high_value)] if low_value != 0 and low_value < high_value \
                else []
        ranges = wanted.get(0x55)
        if ranges is None:
            return []
        form, value = ranges
        if form == 0x23:                                        # DW_FORM_rnglistx
            top = self.cu.get_top_DIE()
            base = top.attributes.get("DW_AT_rnglists_base")
            base_value = base.value if base is not None else 12
            data = self.info.rnglists or b""
            size = self.offset_size
            entry = struct.unpack_from(self.order + ("Q" if size == 8 else "I"), data,
                                       base_value + value * size)[0]
            value = base_value + entry
        return [(start, stop)
                for start, stop in self.dwarf.range_list(self.info, self.cu, value)
                if start != 0 and start < stop]

    def _address(self, form: int, value: int) -> int:
        if form in _ADDRX_FORMS:
            address: int = self.info.info.get_addr(self.cu, value)
            return address
        return value

    def _form_size(self, form: int) -> int | None:
        """The size of an attribute of ``form`` when it is fixed in this unit, else None."""
        size = _FIXED_FORM_SIZES.get(form)
        if size is not None:
            return size
        if form == 0x01:                                        # addr
            return int(self.address_size)
        if form in _OFFSET_FORMS or (form == 0x10 and self.version > 2):
            return int(self.offset_size)
        if form == 0x10:                                        # ref_addr, DWARF 2
            return int(self.address_size)
        return None

    def _sibling(self, die_start: int, sibling: tuple[int, int] | None) -> int | None:
        """Where a DIE's DW_AT_sibling (a unit-local reference) points: strictly after the
        DIE and inside the data, else DWARFError; None without a usable one."""
        if sibling is None or sibling[0] not in _REF_FORMS_LOCAL:
            return None
        if not die_start < sibling[1] <= len(self.data):
            raise DWARFError("bad DW_AT_sibling")
        return sibling[1]

    def _attributes(self, pos: int, specs: tuple[tuple[int, int, int], ...],
                    wanted: dict[int, tuple[int, int]] | None) -> int:
        """Skip (or, for the attributes this needs, decode) one DIE's attributes."""
        data = self.data
        order = self.order
        for attribute, form, constant in specs:
            if form == 0x16:                                    # DW_FORM_indirect
                form, pos = _uleb(data, pos)
            size = self._form_size(form)
            if wanted is not None and attribute in self.codes:
                if form == 0x21:                                # implicit_const
                    value = constant
                elif size is not None:
                    value = int.from_bytes(data[pos:pos + size],
                                           "little" if order == "<" else "big")
                elif form in (0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23, 0x1F01, 0x1F02):
                    value, _ = _uleb(data, pos)
                elif form == 0x0D:
                    value, _ = _sleb(data, pos)
                else:
                    value = 0
                wanted[attribute] = (form, value)
            if size is not None:
                pos += size
            elif form in _LEB_FORMS:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif form == 0x08:                                  # string
                end = data.index(b"\0", pos)
                pos = end + 1
            elif form in (0x09, 0x18):                          # block, exprloc
                length, pos = _uleb(data, pos)
                pos += length
            elif form == 0x0A:                                  # block1
                pos += 1 + data[pos]
            elif form == 0x03:                                  # block2
                pos += 2 + int.from_bytes(data[pos:pos + 2], "little" if order == "<" else "big")
            elif form == 0x04:                                  # block4
                pos += 4 + int.from_bytes(data[pos:pos + 4], "little" if order == "<" else "big")
            else:
                raise DWARFError(f"unknown attribute form {form:#x}")
            if pos > len(data):
                raise DWARFError("DIE runs past the end of its unit")
        return pos


# Attributes the scanners decode: DW_AT_sibling, low_pc, high_pc, ranges.
_TOP_ATTRIBUTES = frozenset((0x01, 0x11, 0x12, 0x55))
_REF_FORMS_LOCAL = frozenset((0x11, 0x12, 0x13, 0x14, 0x15))
_CONSTANT_FORM_CODES = frozenset((0x0B, 0x05, 0x06, 0x07, 0x0F, 0x0D, 0x21))
_ADDRX_FORMS = frozenset((0x1B, 0x29, 0x2A, 0x2B, 0x2C, 0x1F01))
_FIXED_FORM_SIZES = {0x05: 2, 0x06: 4, 0x07: 8, 0x0B: 1, 0x0C: 1, 0x11: 1, 0x12: 2,
                     0x13: 4, 0x14: 8, 0x19: 0, 0x1C: 4, 0x1E: 16, 0x20: 8, 0x21: 0,
                     0x24: 8, 0x25: 1, 0x26: 2, 0x27: 3, 0x28: 4, 0x29: 1, 0x2A: 2,
                     0x2B: 3, 0x2C: 4}
_OFFSET_FORMS = frozenset((0x0E, 0x17, 0x1D, 0x1F, 0x1F20, 0x1F21))
_LEB_FORMS = frozenset((0x0D, 0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23, 0x1F01, 0x1F02))


def _sleb(data: bytes, pos: int) -> tuple[int, int]:
    return read_sleb128(data, pos, len(data))


def _abbreviations(data: bytes, offset: int) -> dict[int, tuple[int, bool,
                                                               tuple[tuple[int, int, int], ...]]]:
    """The abbreviation table at ``offset`` of ``.debug_abbrev``: code -> (tag, has
    children, ((attribute, form, implicit constant), ...))."""
    table: dict[int, tuple[int, bool, tuple[tuple[int, int, int], ...]]] = {}
    pos = offset
    while True:
        code, pos = _uleb(data, pos)
        if code == 0:
            return table
        tag, pos = _uleb(data, pos)
        children = data[pos] != 0
        pos += 1
        specs: list[tuple[int, int, int]] = []
        while True:
            attribute, pos = _uleb(data, pos)
            form, pos = _uleb(data, pos)
            constant = 0
            if form == 0x21:
                constant, pos = _sleb(data, pos)
            if attribute == 0 and form == 0:
                break
            specs.append((attribute, form, constant))
        table[code] = (tag, children, tuple(specs))


# ----------------------------------------------------------------------------- call sites

# DW_AT_sibling, low_pc, call_return_pc, call_tail_call, GNU_tail_call.
_CALL_SITE_ATTRIBUTES = frozenset((0x01, 0x11, 0x7D, 0x82, 0x2115))
_CALL_SITE_TAG_CODES = frozenset((0x48, 0x4109))    # DW_TAG_call_site, DW_TAG_GNU_call_site
# The DIEs whose children can hold call sites, which the scanner enters: subprogram,
# inlined subroutine, lexical, try and catch blocks, namespace, module. Any other DIE
# with children (types above all) is skipped, through DW_AT_sibling when it has one.
_CODE_SCOPES = frozenset((0x2E, 0x1D, 0x0B, 0x32, 0x25, 0x39, 0x1E))
# gdb's function marks that the DW_TAG_call_site list is complete (DW_AT_call_all_calls,
# DW_AT_GNU_all_call_sites, DW_AT_call_all_tail_calls, DW_AT_GNU_all_tail_call_sites).
_ALL_CALLS_FLAGS = ("DW_AT_call_all_calls", "DW_AT_GNU_all_call_sites",
                    "DW_AT_call_all_tail_calls", "DW_AT_GNU_all_tail_call_sites")
# Where gdb's read_call_site_scope looks for the callee, in this order.
_TARGET_ATTRIBUTES = ("DW_AT_call_target", "DW_AT_GNU_call_site_target", "DW_AT_call_origin",
                      "DW_AT_abstract_origin")
_REFERENCE_FORMS = _LOCAL_REFS | _SUPPLEMENTARY_REFS | {"DW_FORM_ref_addr", "DW_FORM_ref_sig8"}
_RANGES_OFFSET_FORMS = frozenset(("DW_FORM_sec_offset", "DW_FORM_data4", "DW_FORM_data8",
                                  "DW_FORM_udata", "DW_FORM_data2", "DW_FORM_data1"))
_MAX_TAIL_STEPS = 100_000       # call sites entered by one tail-call search (gdb: no limit)


@dataclass(slots=True, frozen=True)
class _RawCallSite:
    """A DW_TAG_call_site as the scanner read it."""

    offset: int                         # of the DIE in .debug_info
    pc: int                             # return pc (DW_AT_call_return_pc or DW_AT_low_pc)
    tail: bool                          # DW_AT_call_tail_call / DW_AT_GNU_tail_call
    scopes: tuple[tuple[int, int], ...]  # enclosing DIEs (tag, offset), outermost first

    def owner(self) -> int | None:
        """The DIE whose tail-call list gdb puts this site in: the nearest enclosing
        DW_TAG_subprogram (or DW_TAG_subroutine_type), through inlined subroutines."""
        for tag, offset in reversed(self.scopes):
            if tag in (0x2E, 0x15):
                return offset
        return None


@dataclass(slots=True)
class _CallSiteIndex:
    """The call sites of one unit: by return pc (DIE order) and, for the tail calls, by
    the function that makes them (DIE order)."""

    by_pc: dict[int, list[_RawCallSite]]
    tails: dict[int, list[_RawCallSite]]
    valid: bool = True


@dataclass(slots=True, frozen=True)
class _Target:
    """A call site's callee as gdb 13 records it (``call_site_target``): ``addresses``
    (PHYSADDR, or ADDRESSES: one per range of the callee), ``name`` (PHYSNAME: a minimal
    symbol to look up), ``none`` (a DWARF expression, or nothing usable: gdb's
    NO_ENTRY_VALUE_ERROR whenever it needs the target) or ``unknown`` (a name gdb would
    compute and this module does not: C++ without a linkage name)."""

    kind: str
    addresses: tuple[int, ...] = ()
    name: str | None = None


_NO_TARGET = _Target("none")
_UNKNOWN_TARGET = _Target("unknown")


class _NoEntryValue(Exception):
    """gdb's NO_ENTRY_VALUE_ERROR: ``call_site_find_chain`` gives up, no tail-call frame."""


class _Unknown(Exception):
    """What gdb would do depends on what this module does not know (another file's
    symbols, names it does not compute, a search past the work limit)."""


_CHAIN_ERRORS: tuple[type[BaseException], ...] = (*_DWARF_ERRORS, _Unknown)


class _CallSiteScanner(_TopScanner):
    """Every DW_TAG_call_site / DW_TAG_GNU_call_site of a unit with its return pc, its
    tail-call flag and the DIEs that enclose it, read from the bytes like
    :class:`_TopScanner`: subtrees that cannot hold code are skipped through
    DW_AT_sibling, and a DIE whose attributes all have fixed sizes in one step."""

    def __init__(self, dwarf: _Dwarf, info: _Info, cu: CompileUnit) -> None:
        super().__init__(dwarf, info, cu)
        self.codes = _CALL_SITE_ATTRIBUTES
        self._fixed: dict[int, int | None] = {}

    def call_sites(self) -> list[_RawCallSite]:
        data = self.data
        abbreviations = self.abbreviations
        base = self.cu.cu_offset
        code, pos = _uleb(data, self.cu.cu_die_offset - base)
        _tag, children, specs = abbreviations[code]
        pos = self._attributes(pos, specs, None)
        sites: list[_RawCallSite] = []
        if not children:
            return sites
        scopes: list[tuple[int, int]] = []
        fixed = self._fixed
        while True:
            die_start = pos
            code, pos = _uleb(data, pos)
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
            elif has_children and tag not in _CODE_SCOPES:
                wanted = {}
                pos = self._attributes(pos, specs, wanted)
                following = self._sibling(die_start, wanted.get(0x01))
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
              scopes: list[tuple[int, int]]) -> _RawCallSite | None:
        # gdb: DW_AT_call_return_pc, else (GNU call sites) DW_AT_low_pc; none: ignored.
        pc = wanted.get(0x7D) or wanted.get(0x11)
        if pc is None:
            return None
        tail = False
        for code in (0x82, 0x2115):
            flag = wanted.get(code)
            if flag is not None and (flag[0] == 0x19 or flag[1] != 0):   # flag_present
                tail = True
        return _RawCallSite(offset, self._address(*pc), tail, tuple(scopes))

    def _fixed_size(self, specs: tuple[tuple[int, int, int], ...]) -> int | None:
        """The size of a DIE's attributes when no form has a variable size."""
        total = 0
        for _attribute, form, _constant in specs:
            size = self._form_size(form)
            if size is None:
                return None
            total += size
        return total


@dataclass(slots=True)
class _Chain:
    """gdb's ``call_site_chain``: the call sites (return pcs) of the first path found,
    outermost first, and how many of its first (``callers``) and last (``callees``) sites
    every path found has in common (``chain_candidate``)."""

    sites: list[int]
    pcs: list[int]
    callers: int
    callees: int

    def intersect(self, sites: list[int]) -> bool:
        """Keep only what ``sites`` (another path) shares; False when nothing is left."""
        length = len(sites)
        # gdb only lowers a count at the first difference within the shorter length.
        for index in range(min(self.callers, length)):
            if self.sites[index] != sites[index]:
                self.callers = index
                break
        for index in range(min(self.callees, length)):
            if self.sites[-1 - index] != sites[-1 - index]:
                self.callees = index
                break
        return self.callers != 0 or self.callees != 0

    def frames(self) -> list[int]:
        """The pcs of gdb's virtual tail-call frames, innermost first (gdb's
        ``pretended_chain_levels`` and ``pretend_pc``): the common callees from the last,
        then the common callers from the last; all of them when every path agrees."""
        length = len(self.sites)
        if self.callers == length and self.callees == length:
            levels = length
        else:
            levels = min(self.callers + self.callees, length)
        frames: list[int] = []
        for level in range(levels):
            if level < self.callees:
                frames.append(self.pcs[length - level - 1])
            elif self.callees != length and level - self.callees < self.callers:
                frames.append(self.pcs[self.callers - (level - self.callees) - 1])
            else:
                break
        return frames


@dataclass(slots=True)
class _Unit:
    """A compilation unit: its language and its top-level functions by address."""

    cu: CompileUnit
    language: int
    functions: _Intervals
    nested: _Intervals | None = None
    call_sites: _CallSiteIndex | None = None


class _Dwarf:
    """The parsed DWARF of one file and the address lookups on it."""

    def __init__(self, table: _SectionTable, debug_root: str) -> None:
        self.main = _load_info(table)
        self.supplementary: _Info | None = None
        supplementary = _supplementary_table(table, debug_root)
        if supplementary is not None:
            try:
                self.supplementary = _load_info(supplementary)
                self.main.info.supplementary_dwarfinfo = self.supplementary.info
            except _DWARF_ERRORS:
                self.supplementary = None
        self._infos = {id(self.main.info): self.main}
        if self.supplementary is not None:
            self._infos[id(self.supplementary.info)] = self.supplementary
        arange_entries = (_aranges(self.main.aranges, self.main.little)
                          if self.main.aranges else [])
        self._aranges = _Intervals(arange_entries)
        self._arange_units = {entry[2] for entry in arange_entries}
        self._other_units: _Intervals | None = None
        self._units: dict[int, _Unit | None] = {}
        self._ranges: dict[tuple[int, int], list[tuple[int, int]] | None] = {}
        self._parents: dict[tuple[int, int], DIE | None] = {}
        self._table = table
        self._symbols: NamedSymbols | None = None
        self._scopes_processed: dict[int, bool] = {}
        self._targets: dict[int, _Target] = {}
        self._tail_lists: dict[int, list[tuple[_Unit, _RawCallSite]] | None] = {}

    # -- lookups

    def frames_at(self, address: int) -> list[str] | None:
        found = self._frames(address)
        return found[2] if found is not None else None

    def _frames(self, address: int) -> tuple[_Unit, list[DIE], list[str]] | None:
        """The unit, the function DIEs and their names at ``address``, innermost first down
        to the innermost non-inlined subprogram (gdb's ``block_linkage_function``)."""
        for unit_offset in self._unit_offsets_at(address):
            unit = self._unit(unit_offset)
            if unit is None:
                continue
            for function_offset in unit.functions.containing(address):
                function = unit.cu.get_DIE_from_refaddr(function_offset)
                found = self._names(unit, function, address)
                if found is not None:
                    return unit, *found
            # Nested functions (GNU C, Pascal, Fortran) may lie outside their parent's
            # ranges: index them the first time an address misses the top-level ones.
            if unit.nested is None:
                unit.nested = self._nested_functions(unit)
            for function in unit.nested.containing(address):
                found = self._names(unit, function, address)
                if found is not None:
                    return unit, *found
        return None

    def _names(self, unit: _Unit, function: DIE, address: int
               ) -> tuple[list[DIE], list[str]] | None:
        """The frames at ``address`` inside ``function`` (DIEs and names), innermost first."""
        path = [function, *self._descend(function, address)]
        dies: list[DIE] = []
        names: list[str] = []
        for die in reversed(path):
            name = self._print_name(die, unit.language)
            if name is None:
                return None
            dies.append(die)
            names.append(name)
            if die.tag == "DW_TAG_subprogram":
                return dies, names
        return None

    def _nested_functions(self, unit: _Unit) -> _Intervals:
        items: list[tuple[int, int, Any]] = []
        seen = set(unit.functions.payloads())
        pending = [unit.cu.get_DIE_from_refaddr(offset) for offset in seen]
        while pending:
            parent = pending.pop()
            for child in _children(parent):
                tag = child.tag
                if tag == "DW_TAG_subprogram" and child.offset not in seen:
                    seen.add(child.offset)
                    for low, high in self._die_ranges(child) or ():
                        items.append((low, high, child))
                    pending.append(child)
                elif tag in _BLOCK_TAGS or tag == "DW_TAG_inlined_subroutine":
                    pending.append(child)
        return _Intervals(items)

    def _unit_offsets_at(self, address: int) -> Iterator[int]:
        """The units whose ranges contain ``address``: from ``.debug_aranges``, else (no
        entry there) from the top DIEs of the units it does not list."""
        listed = list(dict.fromkeys(self._aranges.containing(address)))
        if listed:
            yield from listed
            return
        if self._other_units is None:
            self._other_units = self._scan_units()
        yield from dict.fromkeys(self._other_units.containing(address))

    def _scan_units(self) -> _Intervals:
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
                for low, high in self._die_ranges(top) or ():
                    items.append((low, high, offset))
            except _DWARF_ERRORS:
                continue
        return _Intervals(items)

    def _unit(self, offset: int) -> _Unit | None:
        if offset in self._units:
            return self._units[offset]
        unit: _Unit | None = None
        try:
            cu = self.main.info.get_CU_at(offset)
            top = cu.get_top_DIE()
            language = top.attributes.get("DW_AT_language")
            items = _TopScanner(self, self.main, cu).functions()
            unit = _Unit(cu, language.value if language is not None else 0, _Intervals(items))
        finally:
            self._units[offset] = unit
        return unit

    def _descend(self, die: DIE, address: int) -> list[DIE]:
        """The named function DIEs below ``die`` that contain ``address``, outermost first."""
        for child in _children(die):
            tag = child.tag
            if tag in _FUNCTION_TAGS:
                ranges = self._die_ranges(child)
                if not ranges or not any(low <= address < high for low, high in ranges):
                    continue
                if self._has_name(child):
                    return [child, *self._descend(child, address)]
                # gdb drops an unnamed function with its children: the enclosing block
                # keeps the address.
            elif tag in _BLOCK_TAGS:
                ranges = self._die_ranges(child)
                if ranges is None:
                    inner = self._descend(child, address)
                    if inner:
                        return inner
                elif any(low <= address < high for low, high in ranges):
                    return self._descend(child, address)
        return []

    # -- call sites and tail calls (gdb 13: dwarf2/read.c read_call_site_scope,
    #    dwarf2/loc.c call_site_find_chain, dwarf2/frame-tailcall.c)

    def function_entry(self, address: int) -> int | None:
        found = self._frames(address)
        return self._entry(found[1][-1]) if found is not None else None

    def _entry(self, die: DIE) -> int | None:
        """gdb's ``block::entry_pc``: the start of a contiguous function, else of the first
        of its ranges in DW_AT_ranges order (gdb 13 ignores DW_AT_entry_pc)."""
        ranges = self._die_ranges(die)
        return ranges[0][0] if ranges else None

    def call_site_targets(self, return_address: int) -> list[int] | str | None:
        """The callee of the call site gdb's ``call_site_for_pc`` finds for
        ``return_address``: addresses, a minimal-symbol name, or None (no call site, or
        one whose target gdb cannot use without a frame)."""
        for unit_offset in self._unit_offsets_at(return_address - 1):
            unit = self._unit(unit_offset)
            if unit is None:
                continue
            # gdb looks only in the unit of return_address - 1.
            index = self._call_site_index(unit)
            site = self._winner(unit, index, return_address)
            if site is None:
                return None
            target = self._site_target(unit, site)
            if target.kind == "addresses":
                return list(target.addresses) or None
            if target.kind == "name":
                return target.name
            return None
        return None

    def tail_call_pcs(self, targets: list[int], callee: int) -> list[int]:
        """The pcs of gdb's tail-call frames, innermost first (see
        :meth:`DwarfNames.tail_call_chain`); raises _Unknown when this cannot tell."""
        if callee in targets:
            return []
        try:
            chain = self._find_chain(targets, callee)
        except _NoEntryValue:
            return []
        return chain.frames() if chain is not None else []

    def _find_chain(self, targets: list[int], callee: int) -> _Chain | None:
        """gdb's ``call_site_find_chain_1`` / ``call_site_find_chain_2``, without recursion:
        a depth-first search from the functions at ``targets`` through their tail-call
        sites, in gdb's order, never entering a call site (by return pc) twice on one path;
        each path whose last site calls ``callee`` is intersected into the result (None
        once nothing is common to all paths: gdb stops there)."""
        result: _Chain | None = None
        chain: list[_RawCallSite] = []
        on_chain: set[int] = set()
        pending: list[Iterator[tuple[_Unit, _RawCallSite]]] = [self._candidates(targets)]
        steps = 0
        while pending:
            step = next(pending[-1], None)
            if step is None:
                pending.pop()
                if chain:
                    on_chain.discard(chain.pop().pc)
                continue
            unit, site = step
            if site.pc in on_chain:
                continue
            steps += 1
            if steps > _MAX_TAIL_STEPS:
                raise _Unknown("tail-call search too long")
            on_chain.add(site.pc)
            chain.append(site)
            addresses = self._site_addresses(unit, site)
            if callee in addresses:
                offsets = [item.offset for item in chain]
                if result is None:
                    result = _Chain(offsets, [item.pc for item in chain], len(chain),
                                    len(chain))
                elif not result.intersect(offsets):
                    return None
                on_chain.discard(chain.pop().pc)
            else:
                pending.append(self._candidates(addresses))
        return result

    def _candidates(self, addresses: Iterable[int]) -> Iterator[tuple[_Unit, _RawCallSite]]:
        for address in addresses:
            yield from self._tail_list(address)

    def _tail_list(self, address: int) -> list[tuple[_Unit, _RawCallSite]]:
        """gdb's ``func_addr_to_tail_call_list`` and ``TYPE_TAIL_CALL_LIST``: the tail-call
        sites of the function whose entry is ``address``, last in DIE order first (gdb
        prepends them as it reads them). Only functions marked as listing all their calls
        have the list; a site whose return pc an earlier site of the unit already has is
        dropped, as are sites in functions or blocks gdb ignores (no name, bad ranges).
        _NoEntryValue when no function starts exactly at ``address``."""
        if address in self._tail_lists:
            cached = self._tail_lists[address]
            if cached is None:
                raise _NoEntryValue(hex(address))
            return cached
        found = self._frames(address)
        if found is None or self._entry(found[1][-1]) != address:
            self._tail_lists[address] = None
            raise _NoEntryValue(hex(address))
        unit, dies, _names = found
        function = dies[-1]
        sites: list[tuple[_Unit, _RawCallSite]] = []
        if any(self._flag(function, flag) for flag in _ALL_CALLS_FLAGS):
            index = self._call_site_index(unit)
            for site in index.tails.get(function.offset, ()):
                if self._winner(unit, index, site.pc) is site:
                    sites.append((unit, site))
            sites.reverse()
        self._tail_lists[address] = sites
        return sites

    def _site_addresses(self, unit: _Unit, site: _RawCallSite) -> tuple[int, ...]:
        """gdb's ``call_site_target::iterate_over_addresses`` without a caller frame."""
        target = self._site_target(unit, site)
        if target.kind == "addresses":
            return target.addresses
        if target.kind == "name" and target.name is not None:
            symbol = self.symbol(target.name)
            if symbol is None:
                # gdb looks the name up in every object file: maybe another one has it.
                raise _Unknown(target.name)
            return (symbol[0],)
        if target.kind == "unknown":
            raise _Unknown("call site target")
        raise _NoEntryValue("call site target")

    def symbol(self, name: str) -> tuple[int, bool] | None:
        if self._symbols is None:
            self._symbols = named_symbols(self._table.path)
        return self._symbols.lookup(name)

    def _call_site_index(self, unit: _Unit) -> _CallSiteIndex:
        index = unit.call_sites
        if index is None:
            index = unit.call_sites = _CallSiteIndex({}, {}, valid=False)
            sites = _CallSiteScanner(self, self.main, unit.cu).call_sites()
            for site in sites:
                index.by_pc.setdefault(site.pc, []).append(site)
                if site.tail:
                    owner = site.owner()
                    if owner is not None:
                        index.tails.setdefault(owner, []).append(site)
            index.valid = True
        if not index.valid:
            raise DWARFError("unreadable call sites")
        return index

    def _winner(self, unit: _Unit, index: _CallSiteIndex, pc: int) -> _RawCallSite | None:
        """The call site gdb keeps for return pc ``pc``: the first in DIE order that gdb
        reads (it ignores later ones with a complaint)."""
        for site in index.by_pc.get(pc, ()):
            if all(self._scope_processed(unit, tag, offset) for tag, offset in site.scopes):
                return site
        return None

    def _scope_processed(self, unit: _Unit, tag: int, offset: int) -> bool:
        """Whether gdb's ``process_die`` reads the children of the enclosing DIE: a function
        (``read_func_scope``) needs a name and valid pc bounds; a block
        (``read_lexical_block_scope``, also an inlined subroutine without DW_AT_call_line
        or DW_AT_call_file) must not have invalid ones."""
        if tag not in (0x2E, 0x1D, 0x0B, 0x32, 0x25):
            return True
        known = self._scopes_processed.get(offset)
        if known is None:
            die = unit.cu.get_DIE_from_refaddr(offset)
            if tag == 0x1D and (self._attribute(die, "DW_AT_call_line") is None
                                or self._attribute(die, "DW_AT_call_file") is None):
                tag = 0x0B
            ranges = self._die_ranges(die)
            if tag in (0x2E, 0x1D):
                known = bool(ranges) and self._has_name(die)
            else:
                known = ranges is None or bool(ranges)
            self._scopes_processed[offset] = known
        return known

    def _site_target(self, unit: _Unit, site: _RawCallSite) -> _Target:
        target = self._targets.get(site.offset)
        if target is None:
            target = self._read_target(unit.cu.get_DIE_from_refaddr(site.offset))
            self._targets[site.offset] = target
        return target

    def _read_target(self, die: DIE) -> _Target:
        """The callee of call site ``die`` as gdb 13's ``read_call_site_scope`` records it."""
        holder: DIE | None = None
        name = ""
        for name in _TARGET_ATTRIBUTES:
            holder = self._holder(die, name)
            if holder is not None:
                break
        if holder is None:
            return _NO_TARGET
        form = holder.attributes[name].form
        if form not in _REFERENCE_FORMS:
            # A DWARF expression (even a constant DW_OP_addr): gdb evaluates it only with
            # the caller's frame, which the tail-call search never has.
            return _NO_TARGET
        target = self._reference(holder, name)
        if target is None:
            return _UNKNOWN_TARGET
        if self._flag(target, "DW_AT_declaration") \
                and self._holder(target, "DW_AT_specification") is None:
            physname = self._linkage_name(target)
            if physname is None:
                if self._language(target) in _QUALIFIED_LANGUAGES:
                    return _UNKNOWN_TARGET          # gdb computes a qualified physname
                physname = self._string(target, "DW_AT_name")
            return _Target("name", name=physname) if physname else _NO_TARGET
        ranges_holder = self._holder(target, "DW_AT_ranges")
        if ranges_holder is not None \
                and ranges_holder.attributes["DW_AT_ranges"].form in _RANGES_OFFSET_FORMS:
            # One address per range: the cold part of a split function too.
            return _Target("addresses", tuple(low for low, high in self._range_list(ranges_holder)
                                              if low != 0 and low < high))
        entry = self._entry(target)
        return _Target("addresses", (entry,)) if entry is not None else _NO_TARGET

    @staticmethod
    def _language(die: DIE) -> int:
        language = die.cu.get_top_DIE().attributes.get("DW_AT_language")
        value = language.value if language is not None else 0
        return value if isinstance(value, int) else 0

    # -- ranges

    def _die_ranges(self, die: DIE) -> list[tuple[int, int]] | None:
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
            if high_attribute.form in _CONSTANT_FORMS:
                high += low
            if not isinstance(low, int) or not isinstance(high, int):
                raise DWARFError("bad pc attributes")
            result = [(low, high)] if low != 0 and low < high else []
        elif "DW_AT_ranges" in attributes:
            result = [(low, high) for low, high in self._range_list(die)
                      if low != 0 and low < high]
        else:
            result = None
        self._ranges[key] = result
        return result

    def _range_list(self, die: DIE) -> list[tuple[int, int]]:
        offset = die.attributes["DW_AT_ranges"].value
        if not isinstance(offset, int):
            raise DWARFError("bad DW_AT_ranges")
        return self.range_list(self._infos[id(die.dwarfinfo)], die.cu, offset)

    def range_list(self, info: _Info, cu: CompileUnit | TypeUnit, offset: int
                   ) -> list[tuple[int, int]]:
        """The ranges of the range list at ``offset`` (.debug_ranges before DWARF 5,
        .debug_rnglists from 5), for a DIE of unit ``cu``."""
        top = cu.get_top_DIE()
        base_attribute = top.attributes.get("DW_AT_low_pc")
        base = base_attribute.value if base_attribute is not None else 0
        if not isinstance(base, int):
            raise DWARFError("bad DW_AT_low_pc")
        order = "<" if info.little else ">"
        size = cu["address_size"]
        address = order + ("Q" if size == 8 else "I")
        result: list[tuple[int, int]] = []
        if cu["version"] < 5:
            data = info.ranges
            if data is None:
                raise DWARFError("no .debug_ranges")
            pair = order + ("QQ" if size == 8 else "II")
            largest = (1 << (8 * size)) - 1
            for begin, end in struct.iter_unpack(pair, data[offset:offset + 2 * size * 4096]):
                if begin == 0 and end == 0:
                    return result
                if begin == largest:
                    base = end
                else:
                    result.append((base + begin, base + end))
            raise DWARFError("unterminated range list")
        data = info.rnglists
        if data is None:
            raise DWARFError("no .debug_rnglists")
        pos = offset
        while True:
            kind = data[pos]
            pos += 1
            if kind == 0:                                   # DW_RLE_end_of_list
                return result
            if kind == 1:                                   # DW_RLE_base_addressx
                index, pos = _uleb(data, pos)
                base = info.info.get_addr(cu, index)
            elif kind in (2, 3):                            # startx_endx, startx_length
                first, pos = _uleb(data, pos)
                second, pos = _uleb(data, pos)
                start = info.info.get_addr(cu, first)
                stop = info.info.get_addr(cu, second) if kind == 2 else start + second
                result.append((start, stop))
            elif kind == 4:                                 # DW_RLE_offset_pair
                first, pos = _uleb(data, pos)
                second, pos = _uleb(data, pos)
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
                length, pos = _uleb(data, pos + size)
                result.append((start, start + length))
            else:
                raise DWARFError(f"unknown range list entry kind {kind}")

    # -- names

    def _reference(self, die: DIE, name: str) -> DIE | None:
        """The DIE that attribute ``name`` of ``die`` refers to, or None."""
        attribute = die.attributes[name]
        form = attribute.form
        value = attribute.raw_value
        if not isinstance(value, int):
            return None
        if form in _LOCAL_REFS:
            return die.cu.get_DIE_from_refaddr(die.cu.cu_offset + value)
        if form == "DW_FORM_ref_addr":
            return self._die_at(self._infos[id(die.dwarfinfo)], value)
        if form in _SUPPLEMENTARY_REFS and self.supplementary is not None:
            return self._die_at(self.supplementary, value)
        return None

    @staticmethod
    def _die_at(info: _Info, offset: int) -> DIE | None:
        units = info.unit_offsets()
        index = bisect_right(units, offset) - 1
        if index < 0:
            return None
        cu = info.info.get_CU_at(units[index])
        return cu.get_DIE_from_refaddr(offset)

    def _origin(self, die: DIE) -> DIE | None:
        """Where gdb's ``dwarf2_attr`` looks next: the DIE named by the DIE's (last)
        DW_AT_specification or DW_AT_abstract_origin attribute."""
        link = None
        for name in die.attributes:
            if name in ("DW_AT_specification", "DW_AT_abstract_origin"):
                link = name
        return self._reference(die, link) if link is not None else None

    def _holder(self, die: DIE, name: str) -> DIE | None:
        """The DIE that holds attribute ``name`` for ``die``: itself or one along its origin
        chain (gdb's ``dwarf2_attr``)."""
        current: DIE | None = die
        for _ in range(_MAX_HOPS):
            if current is None:
                return None
            if name in current.attributes:
                return current
            current = self._origin(current)
        return None

    def _attribute(self, die: DIE, name: str) -> Any:
        """The value of attribute ``name`` on ``die`` or along its origin chain."""
        holder = self._holder(die, name)
        return holder.attributes[name].value if holder is not None else None

    def _flag(self, die: DIE, name: str) -> bool:
        """gdb's ``dwarf2_flag_true_p``."""
        value = self._attribute(die, name)
        return isinstance(value, int) and value != 0

    def _string(self, die: DIE, name: str) -> str | None:
        value = self._attribute(die, name)
        if isinstance(value, bytes) and value:
            return value.decode("utf-8", "replace")
        if isinstance(value, str) and value:
            return value
        return None

    def _has_name(self, die: DIE) -> bool:
        return (self._string(die, "DW_AT_name") is not None
                or self._linkage_name(die) is not None)

    def _linkage_name(self, die: DIE) -> str | None:
        return (self._string(die, "DW_AT_linkage_name")
                or self._string(die, "DW_AT_MIPS_linkage_name"))

    def _print_name(self, die: DIE, language: int) -> str | None:
        """The name gdb prints for the function DIE ``die``."""
        name = self._string(die, "DW_AT_name")
        if language in _CPLUS_LANGUAGES:
            linkage = self._linkage_name(die)
            demangled = demangle(linkage) if linkage is not None else None
            if demangled is not None:
                return cplus_function_name(demangled)
        if language in _QUALIFIED_LANGUAGES:
            if name is None:
                return self._linkage_name(die)
            return "::".join([*self._scopes(die), name])
        return self._linkage_name(die) or name

    def _scopes(self, die: DIE) -> list[str]:
        """Names of the namespaces, classes and modules enclosing the declaration of
        ``die``, outermost first."""
        declaration = die
        for _ in range(_MAX_HOPS):
            following = self._origin(declaration)
            if following is None:
                break
            declaration = following
        scopes: list[str] = []
        parent = self._parent(declaration)
        while parent is not None and parent.tag in _QUALIFYING_PARENTS:
            value = parent.attributes.get("DW_AT_name")
            text = value.value if value is not None else None
            if isinstance(text, bytes) and text:
                scopes.append(text.decode("utf-8", "replace"))
            elif parent.tag == "DW_TAG_namespace":
                scopes.append("(anonymous namespace)")
            else:
                break
            parent = self._parent(parent)
        scopes.reverse()
        return scopes

    def _parent(self, die: DIE) -> DIE | None:
        """The parent of ``die`` (found from the top of its unit, forward steps only)."""
        key = (id(die.dwarfinfo), die.offset)
        if key in self._parents:
            return self._parents[key]
        found: DIE | None = None
        search = die.cu.get_top_DIE()
        while found is None and search.offset < die.offset:
            closest: DIE | None = None
            for child in _children(search):
                self._parents[(key[0], child.offset)] = search
                if child.offset == die.offset:
                    found = search
                    break
                if child.offset > die.offset:
                    break
                closest = child
            if found is None:
                if closest is None:
                    break
                search = closest
        self._parents[key] = found
        return found


# ----------------------------------------------------------------------------- public


class DwarfNames:
    """gdb's frame names (inline frames included) for addresses of one ELF file."""

    debug_root: ClassVar[str] = "/usr/lib/debug"

    def __init__(self, table: _SectionTable) -> None:
        self._table = table
        self._dwarf: _Dwarf | None = None
        self._failed = False
        self._cache: dict[int, list[str] | None] = {}

    @property
    def debug_file(self) -> str:
        """The file the DWARF is read from."""
        return self._table.path

    @classmethod
    def open(cls, path: str, build_id: bytes | None) -> DwarfNames | None:
        """DWARF for the ELF file `path`: the file itself when it has .debug_info, else its
        separate debug file /usr/lib/debug/.build-id/<xx>/<rest>.debug (build id), else
        /usr/lib/debug/<path>.debug or the .gnu_debuglink name beside it / under /usr/lib/debug;
        None when there is none or it cannot be parsed (never raise on bad DWARF)."""
        try:
            return cls._open(path, build_id)
        except _DWARF_ERRORS:
            return None

    @classmethod
    def _open(cls, path: str, build_id: bytes | None) -> DwarfNames | None:
        table = _read_section_table(path)
        if table is not None and table.has_dwarf():
            return cls(table)
        if build_id is None and table is not None:
            build_id = table.note_build_id()
        root = cls.debug_root
        candidates: list[str] = []
        if build_id:
            candidates.append(build_id_path(build_id, root))
        absolute = os.path.abspath(path)
        spellings = list(dict.fromkeys((absolute, os.path.realpath(absolute))))
        for spelling in spellings:
            candidates.append(root + spelling + ".debug")
        link = table.debuglink() if table is not None else None
        if link is not None:
            for directory in dict.fromkeys(os.path.dirname(s) for s in spellings):
                candidates += [os.path.join(directory, link),
                               os.path.join(directory, ".debug", link),
                               root + os.path.join(directory, link)]
        for candidate in dict.fromkeys(candidates):
            if candidate == absolute or not os.path.isfile(candidate):
                continue
            found = _read_section_table(candidate)
            if found is None or not found.has_dwarf():
                continue
            if build_id:
                found_id = found.note_build_id()
                if found_id is not None and found_id != build_id:
                    continue
            return cls(found)
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
                names = dwarf.frames_at(address)
            except _DWARF_ERRORS:
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
        dwarf = self._load()
        if dwarf is None:
            return None
        try:
            return dwarf.function_entry(address)
        except _DWARF_ERRORS:
            return None

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
        dwarf = self._load()
        if dwarf is None:
            return None
        try:
            return dwarf.call_site_targets(return_address)
        except _DWARF_ERRORS:
            return None

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
        dwarf = self._load()
        if dwarf is None:
            return None
        try:
            pcs = dwarf.tail_call_pcs(targets, callee_entry)
        except _CHAIN_ERRORS:
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
        dwarf = self._load()
        if dwarf is None:
            return None
        try:
            return dwarf.symbol(name)
        except _DWARF_ERRORS:
            return None

    def _load(self) -> _Dwarf | None:
        if self._dwarf is None and not self._failed:
            try:
                self._dwarf = _Dwarf(self._table, self.debug_root)
            except _DWARF_ERRORS:
                self._failed = True
        return self._dwarf
